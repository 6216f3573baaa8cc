// SPDX-License-Identifier: Apache-2.0
// The NVFP4 quantizer's kernels' own code run on the host against ref::quantize: the tiled
// kernels' per-thread steps (nvfp4_tile_host.hpp), over every option, block shape and input type,
// on ragged shapes with leading dimensions. A difference here is in the kernel's code, not in a
// device or its compiler. No GPU is needed, so this program is not linked with gpu_skip.cu: it
// runs wherever CUDA builds it, CI's cuda stage included (ctest gpu.nvfp4_kernel_steps), and
// keeps the kernels' code under test on machines without a device. catch2_test_quantize_nvfp4
// runs the kernels themselves.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"
#include "nvfp4_tile_host.hpp"

namespace {

using mxkit::nvfp4_options;

struct shape {
  std::size_t rows, cols, ld;
};

constexpr std::uint64_t base_seed = 0x4E5646503446ull;  // the input seed of case n is base_seed + n

}  // namespace

// The steps' "" or first difference from ref::quantize, over 126 inputs (cases 700, 701, ...).
TEST_CASE("nvfp4 kernels on the host: the tiled kernels' steps equal the host reference", "[nvfp4]") {
  int n = 700;
  constexpr shape host_shapes[] = {{97, 161, 170}, {64, 128, 128}, {1, 1, 1}, {130, 300, 304}, {17, 31, 33}, {192, 136, 144}, {70, 40, 40}};
  auto one = [&](const auto* type, const shape& s, const mxkit::block_format& f, int rot, mxkit::rounding r, int copies, bool given) {
    using T = std::remove_cvref_t<decltype(*type)>;
    const std::vector<T> x = gpu_test::convert<T>(gpu_test::adversarial_matrix(s.rows, s.cols, s.ld, base_seed + static_cast<unsigned>(n)));
    nvfp4_options o;
    o.round = r;
    o.hadamard = rot > 0;
    o.hadamard_signs = rot == 2 ? mxkit::hadamard_sign_mask(0x51u + static_cast<unsigned>(n)) : 0u;
    o.seed = 0x1234u + static_cast<unsigned>(n);
    o.stream = static_cast<std::uint32_t>(n % 3);
    const std::optional<float> t = given ? std::optional<float>{n % 2 ? 0.0078125f : 3.5e-3f} : std::nullopt;
    const std::string d = nvfp4_tile_host::compare(mxkit::matrix_view<const T>{x.data(), s.rows, s.cols, s.ld == s.cols ? 0 : s.ld}, f, o,
                                                   copies != 2, copies != 1, mxkit::all_scale_layouts[n % 3],
                                                   mxkit::all_scale_layouts[(n + 1) % 3], t);
    INFO(gpu_test::type_name<T>() << " " << s.rows << "x" << s.cols << " ld " << s.ld << " " << mxkit::nvfp4_format_name(f) << " rot "
                                  << rot << " round " << static_cast<int>(r) << " copies " << copies << " given " << given << ": " << d);
    CHECK(d.empty());
    ++n;
  };
  const mxkit::rounding rounds[] = {mxkit::rounding::nearest_even, mxkit::rounding::stochastic, mxkit::rounding::nearest_away,
                                    mxkit::rounding::toward_zero};
  for (const shape& s : host_shapes)
    for (const mxkit::block_format& f : {mxkit::formats::nvfp4, mxkit::formats::nvfp4_2d})
      for (int rot = 0; rot < 3; ++rot) {
        const mxkit::rounding r = rounds[static_cast<std::size_t>(n) % 4];
        one(static_cast<const mxkit::bfloat16*>(nullptr), s, f, rot, r, n % 3, n % 5 == 0);
        one(static_cast<const float*>(nullptr), s, f, rot, r, (n + 1) % 3, false);
        one(static_cast<const mxkit::float16*>(nullptr), s, f, rot, rounds[static_cast<std::size_t>(n + 1) % 4], 0, true);
      }
}

