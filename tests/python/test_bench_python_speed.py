# SPDX-License-Identifier: Apache-2.0
"""bench/python_speed.py's host-side parts (the benchmark itself needs a GPU): the kernel kinds its
--profile split sorts kernels into, named as torch.profiler names them, and its arguments."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import python_speed  # noqa: E402  (imports no torch and no mxkit at module level)


@pytest.mark.parametrize("name, kind", [
    ("void mxkit::v0::gpu::expand::to_bf16::mxfp8_kernel<true>(unsigned char const*, unsigned long)", "expand"),
    ("mxkit::v0::gpu::expand::fold::e2m1_to_e5m2_kernel(unsigned char const*, unsigned long)", "expand"),
    ("void mxkit::v0::gpu::nvfp4_expand::to_bf16_kernel<mxkit::v0::nvfp4_basic_view<unsigned char const> >(...)", "expand"),
    ("void mxkit::v0::gpu::sm90::gemm_kernel<(mxkit::v0::gpu::sm90::mma_kind)1, (mxkit::v0::gpu::sm90::mma_kind)1>(...)", "gemm"),
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "gemm"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", "gemm"),
    ("void mxkit::v0::gpu::detail::quantize_kernel<mxkit::v0::mx_format<(mxkit::v0::mx_type)3> >(...)", "quantize"),
    ("void mxkit::v0::gpu::detail::nvfp4_amax_kernel<mxkit::v0::minifloat<> , false>(...)", "quantize"),
    ("triton_poi_fused_cat_mul_silu_silu_backward_0", "other"),
    ("Memset (Device)", "other"),
])
def test_kernel_kinds(name, kind):
    assert python_speed.kernel_kind(name) == kind


def test_arguments():
    a = python_speed.parse_args(["--cases", "linear", "--recipes", "mxfp8", "--profile"])
    assert a.cases == ["linear"] and a.recipes == ["mxfp8"] and a.profile
    assert python_speed.parse_args([]).recipes == [r for r, _, _ in python_speed.LINEAR_RECIPES]
    with pytest.raises(SystemExit):
        python_speed.parse_args(["--recipes", "bf16"])
    with pytest.raises(SystemExit):
        python_speed.parse_args(["--tokens", "100"])
