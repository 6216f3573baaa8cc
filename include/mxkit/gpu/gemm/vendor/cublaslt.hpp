// SPDX-License-Identifier: Apache-2.0
#pragma once
// The vendor path (gemm_path::vendor) as an entry of the GEMM's architecture list (gemm/gemm.hpp
// walks it, and puts it first under CUDA): NVIDIA's cuBLASLt for the operands its tuned kernels
// take as they are, loaded at run time (gemm/vendor/cublaslt_api.hpp):
//   bf16 x bf16        K-major or MN-major on either side (any transpose pair)
//   per-tensor FP8     E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3 (cuBLASLt has no E5M2 x E5M2), both
//                      K-major: its one FP8 layout, "TN"
// fp32 or bf16 D, alpha and beta with C = D's previous contents (or the caller's C). MX operands
// never come here: mxkit's own kernels compute their block sums exactly (gemm/sm90/).
// Why: at the Llama shapes, inside the training step as alone, cuBLASLt's tuned bf16 and FP8
// kernels outran mxkit's sm90 kernel (docs/perf/time_to_target.md has the measurements).
//
// Choices, with the cuBLAS documentation section each follows (docs.nvidia.com/cuda/cublas):
//   - layout: mxkit's row-major D = A . B^T is cuBLASLt's column-major D^T = B . A^T
//     (gemm/vendor/layout.hpp writes the mapping out and checks it);
//   - compute type CUBLAS_COMPUTE_32F and scale type CUDA_R_32F: fp32 accumulation, as every
//     mxkit path ("cublasLtMatmul()", the supported type combinations); FP8 keeps the library's
//     default of promoting its tensor-core sums to fp32 (CUBLASLT_MATMUL_DESC_FAST_ACCUM unset);
//   - per-tensor FP8 descale: D = alpha * (1/s_a) (1/s_b) A . B^T. A host scale_inv is folded
//     into alpha. A device scale (delayed scaling, gemm_operand::scale) is folded into alpha on
//     the device: a one-thread kernel on the stream writes alpha (1/s_a) (1/s_b) and beta to
//     scratch, and the call runs in CUBLASLT_POINTER_MODE_DEVICE ("cublasLtPointerMode_t":
//     alpha and beta are read from device memory). cuBLASLt's own scale pointers
//     (CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER) are not used: with an fp32 D, cublasLtMatmul
//     answered CUBLAS_STATUS_NOT_SUPPORTED for an algorithm its heuristic had offered (cuBLASLt
//     13.0 on an H200, tests/gpu/catch2_test_gemm_vendor.cu);
//   - bf16 operands with device decode factors (gemm_operand::decode_scale: NVFP4's tensor scales,
//     gpu/gemm/nvfp4.hpp) are folded into alpha the same way: alpha t_a t_b on the device;
//   - one handle per device, created on first use ("cublasLtCreate()");
//   - the heuristic's first algorithm (cublasLtMatmulAlgoGetHeuristic, tens of microseconds) is
//     kept per problem (device, shape, transposes, types, output type, beta != 0, leading
//     dimensions, alignments) in a mutex-protected map, so a shape pays it once per process and
//     every later call runs the same algorithm: the same bits run to run;
//   - split-K reductions only through a separate pass in fp32 (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
//     "cublasLtReductionScheme_t"): INPLACE is left out as the reproducibility rule asks of
//     every mxkit path, and OUTPUT_TYPE would sum bf16 partials;
//   - workspace up to 32 MiB, the size the chosen algorithm reports it needs, from mxkit's
//     stream-ordered device pool (gpu/memory.hpp), as sm90/dispatch.hpp takes its scratch;
//   - FP8 needs 16-byte aligned pointers and leading dimensions and K a multiple of 16 ("cublasLtMatmul()",
//     FP8 requirements, which refer to "Tensor Core Usage"): supports() and supports_output()
//     refuse the rest, which then takes the next path in the list.
// Not used here: gemm_options::tile_counter and reserved_sms (the persistent sm90 kernel's);
// cuBLASLt schedules its own grid. gemm_options::path = sm90 or vendor = false keep a call on
// mxkit's kernels; MXKIT_CUBLASLT_LIBRARY=none keeps a whole process off this path.
#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/vendor/cublaslt*.hpp is NVIDIA's cuBLASLt: include it only in a CUDA build (gpu/gemm/gemm.hpp does where it applies)"  // and nothing below compiles
#else
#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include <mxkit/error.hpp>
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/gemm/options.hpp>
#include <mxkit/gpu/gemm/vendor/cublaslt_api.hpp>
#include <mxkit/gpu/gemm/vendor/layout.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace vendor {

inline constexpr std::size_t workspace_limit = std::size_t{32} << 20;  // bytes
inline constexpr int max_devices = 64;
inline constexpr std::size_t max_extent = std::size_t{1} << 31;       // rows, columns and K below 2^31

// The current device and its compute capability (major * 10 + minor), asked once per device;
// capability 0 when there is no usable device.
struct device_info {
  int device = -1;
  int capability = 0;
};
inline device_info current_device() {
  static std::array<int, max_devices> capability{};
  static std::array<std::once_flag, max_devices> once;
  int dev = 0;
  if (get_device(&dev) != success || dev < 0 || dev >= max_devices) {
    (void)get_last_error();  // clear the sticky "no device" error
    return {};
  }
  std::call_once(once[static_cast<std::size_t>(dev)], [dev] {
    if (get_compute_capability(&capability[static_cast<std::size_t>(dev)], dev) != success) (void)get_last_error();
  });
  return {dev, capability[static_cast<std::size_t>(dev)]};
}

inline cudaDataType data_type_of(const gemm_operand& o) noexcept {
  if (o.kind == operand_kind::bf16) return CUDA_R_16BF;
  return o.fp8 == fp8_type::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}
inline std::uint32_t element_bytes(const gemm_operand& o) noexcept { return o.kind == operand_kind::bf16 ? 2u : 1u; }

// Operands this path can take at all, before the output is known (the output's checks and the
// heuristic's answer: supports_output).
inline bool operands_fit(const gemm_operand& a, const gemm_operand& b) noexcept {
  if (a.kind != b.kind || a.kind == operand_kind::mx) return false;
  if (a.length == 0 || a.length != b.length) return false;  // empty K: the portable kernel writes beta C
  if (a.lines >= max_extent || b.lines >= max_extent || a.length >= max_extent) return false;
  auto ok = [](const gemm_operand& o) {
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(o.data);
    if (o.kind == operand_kind::bf16) return address % 2 == 0 && o.line_bytes % 2 == 0 && o.line_bytes / 2 < max_extent;
    // FP8 ("cublasLtMatmul()", FP8 requirements): K-major only, 16-byte aligned rows, K % 16 == 0.
    return !o.mn_major && address % 16 == 0 && o.line_bytes % 16 == 0 && o.length % 16 == 0 && o.line_bytes < max_extent;
  };
  if (!ok(a) || !ok(b)) return false;
  // cuBLASLt's FP8 pairs: E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3 ("cublasLtMatmul()", the type table).
  return a.kind != operand_kind::fp8 || a.fp8 == fp8_type::e4m3 || b.fp8 == fp8_type::e4m3;
}

// Whether alpha comes from device memory: an FP8 scale or a bf16 decode factor there.
inline bool device_factors(const gemm_operand& a, const gemm_operand& b) noexcept {
  if (a.kind == operand_kind::fp8) return a.scale != nullptr || b.scale != nullptr;
  return a.kind == operand_kind::bf16 && (a.decode_scale != nullptr || b.decode_scale != nullptr);
}

// Everything that picks cuBLASLt's algorithm for one call: the cache's key.
struct problem_key {
  int device = 0;
  std::uint64_t m = 0, n = 0, k = 0;
  bool transa = false, transb = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;   // cuBLASLt's A (mxkit's B), B (mxkit's A), C, D
  int type_a = 0, type_b = 0;                         // cudaDataType
  bool bf16_out = false, beta = false;
  bool device_alpha = false;                          // alpha and beta in device memory (device_factors)
  std::uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0;  // bytes, up to 16 (layout.hpp)
  auto operator<=>(const problem_key&) const = default;
};

inline problem_key make_key(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, int device) {
  const bool beta = out.beta != 0.0f;
  const std::uint32_t ea = element_bytes(a), eb = element_bytes(b), ed = out.bf16 ? 2u : 4u;
  tn_product t;
  t.p = a.lines;
  t.q = b.lines;
  t.r = a.length;
  t.a_mn_major = a.mn_major;
  t.b_mn_major = b.mn_major;
  t.lda = static_cast<std::int64_t>(a.line_bytes / ea);
  t.ldb = static_cast<std::int64_t>(b.line_bytes / eb);
  t.ldd = static_cast<std::int64_t>(out.ldd);
  t.ldc = beta ? static_cast<std::int64_t>(out.ldc) : t.ldd;  // beta = 0: C is never read; D's layout
  const blas_problem p = to_blas(t);
  problem_key k;
  k.device = device;
  k.m = p.m;
  k.n = p.n;
  k.k = p.k;
  k.transa = p.a.transpose;
  k.transb = p.b.transpose;
  k.lda = p.a.ld;
  k.ldb = p.b.ld;
  k.ldc = p.c.ld;
  k.ldd = p.d.ld;
  k.type_a = static_cast<int>(data_type_of(b));
  k.type_b = static_cast<int>(data_type_of(a));
  k.bf16_out = out.bf16;
  k.beta = beta;
  k.device_alpha = device_factors(a, b);
  k.align_a = matrix_alignment(reinterpret_cast<std::uintptr_t>(b.data), p.a.ld, eb);
  k.align_b = matrix_alignment(reinterpret_cast<std::uintptr_t>(a.data), p.b.ld, ea);
  k.align_c = matrix_alignment(reinterpret_cast<std::uintptr_t>(beta ? out.c : out.d), p.c.ld, ed);
  k.align_d = matrix_alignment(reinterpret_cast<std::uintptr_t>(out.d), p.d.ld, ed);
  return k;
}

// The output checks that do not need the library: D and C in place only with one layout, and
// FP8's 16-byte rule for C and D (rows of m = Q elements, leading dimensions, pointers).
inline bool output_fits(const problem_key& k, const gemm_output_desc& out) noexcept {
  if (k.beta && out.c == out.d && out.ldc != out.ldd) return false;
  if (k.type_a == static_cast<int>(CUDA_R_16BF)) return true;
  const std::uint64_t ed = out.bf16 ? 2 : 4;
  return k.align_d >= 16 && k.align_c >= 16 && (k.m * ed) % 16 == 0;
}

// Descriptors of one call, destroyed with it.
class descriptors {
 public:
  explicit descriptors(const problem_key& k) {
    const cublaslt::api& lt = cublaslt::library();
    const cudaDataType out_type = k.bf16_out ? CUDA_R_16BF : CUDA_R_32F;
    try {
      cublaslt::check(lt.matmul_desc_create(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
      const cublasOperation_t ta = k.transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublaslt::check(lt.matmul_desc_set_attribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "cublasLtMatmulDescSetAttribute(TRANSA)");
      cublaslt::check(lt.matmul_desc_set_attribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "cublasLtMatmulDescSetAttribute(TRANSB)");
      if (k.device_alpha) {
        const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
        cublaslt::check(lt.matmul_desc_set_attribute(op_, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode),
                        "cublasLtMatmulDescSetAttribute(POINTER_MODE)");
      }
      // Column-major [rows, cols] with ld (layout.hpp): A_lt is [k, m] when transposed, else [m, k].
      cublaslt::check(lt.matrix_layout_create(&a_, static_cast<cudaDataType>(k.type_a), k.transa ? k.k : k.m, k.transa ? k.m : k.k, k.lda),
                      "cublasLtMatrixLayoutCreate(A)");
      cublaslt::check(lt.matrix_layout_create(&b_, static_cast<cudaDataType>(k.type_b), k.transb ? k.n : k.k, k.transb ? k.k : k.n, k.ldb),
                      "cublasLtMatrixLayoutCreate(B)");
      cublaslt::check(lt.matrix_layout_create(&c_, out_type, k.m, k.n, k.ldc), "cublasLtMatrixLayoutCreate(C)");
      cublaslt::check(lt.matrix_layout_create(&d_, out_type, k.m, k.n, k.ldd), "cublasLtMatrixLayoutCreate(D)");
    } catch (...) {
      release();
      throw;
    }
  }
  descriptors(const descriptors&) = delete;
  descriptors& operator=(const descriptors&) = delete;
  ~descriptors() { release(); }
  cublasLtMatmulDesc_t op() const noexcept { return op_; }
  cublasLtMatrixLayout_t a() const noexcept { return a_; }
  cublasLtMatrixLayout_t b() const noexcept { return b_; }
  cublasLtMatrixLayout_t c() const noexcept { return c_; }
  cublasLtMatrixLayout_t d() const noexcept { return d_; }

 private:
  void release() noexcept {
    const cublaslt::api& lt = cublaslt::library();
    for (cublasLtMatrixLayout_t* l : {&a_, &b_, &c_, &d_})
      if (*l) (void)lt.matrix_layout_destroy(std::exchange(*l, nullptr));
    if (op_) (void)lt.matmul_desc_destroy(std::exchange(op_, nullptr));
  }
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr, d_ = nullptr;
};

// The handle of `device` (the current one), created on first use there; lives as long as the process.
inline cublasLtHandle_t handle(int device) {
  static std::array<cublasLtHandle_t, max_devices> handles{};
  static std::array<std::once_flag, max_devices> once;
  mxkit::detail::require(device >= 0 && device < max_devices, "gemm (vendor): device ordinal ", device, " is outside [0, ", max_devices, ")");
  // A failed create throws out of call_once, which leaves the flag unset: the next call tries again.
  std::call_once(once[static_cast<std::size_t>(device)],
                 [device] { cublaslt::check(cublaslt::library().create(&handles[static_cast<std::size_t>(device)]), "cublasLtCreate"); });
  return handles[static_cast<std::size_t>(device)];
}

struct algo_choice {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;  // bytes the algorithm needs (at most workspace_limit)
};

// The heuristic's best algorithm for a problem, with this path's preferences.
inline algo_choice ask_heuristic(const problem_key& k) {
  const cublaslt::api& lt = cublaslt::library();
  const descriptors desc(k);
  cublasLtMatmulPreference_t pref = nullptr;
  cublaslt::check(lt.preference_create(&pref), "cublasLtMatmulPreferenceCreate");
  algo_choice choice;
  try {
    const std::uint64_t workspace = workspace_limit;
    // Only reductions in a separate fp32 pass ("cublasLtReductionScheme_t"): not INPLACE, not OUTPUT_TYPE.
    const std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value, const char* what) {
      cublaslt::check(lt.preference_set_attribute(pref, attr, &value, sizeof value), what);
    };
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace, "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions, "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)");
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_a, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)");
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_b, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)");
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_c, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)");
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_d, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)");
    cublasLtMatmulHeuristicResult_t results[4] = {};
    int count = 0;
    const cublasStatus_t st =
        lt.algo_get_heuristic(handle(k.device), desc.op(), desc.a(), desc.b(), desc.c(), desc.d(), pref, 4, results, &count);
    // A failed query (NOT_SUPPORTED: no heuristic for this configuration; INVALID_VALUE: a
    // combination this library version refuses) is an answer, not an error: the product then
    // takes the next path in the list.
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < count; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspace_limit) {
        choice = {true, results[i].algo, results[i].workspaceSize};
        break;
      }
  } catch (...) {
    (void)lt.preference_destroy(pref);
    throw;
  }
  (void)lt.preference_destroy(pref);
  return choice;
}

// The cached choice: asked of the heuristic once per problem and process.
inline algo_choice choose_algo(const problem_key& k) {
  static std::mutex mutex;
  static std::map<problem_key, algo_choice> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cache.find(k); it != cache.end()) return it->second;
  }
  // Asked outside the lock (tens of microseconds); two threads missing at once ask twice and
  // get the same answer, and the first one stored is kept.
  const algo_choice c = ask_heuristic(k);
  const std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(k, c).first->second;
}

#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
// Per-tensor FP8 with a device scale, or bf16 with a device decode factor, on either side: alpha
// and beta for CUBLASLT_POINTER_MODE_DEVICE, [0] = f_a f_b host_alpha with f = 1/s (FP8 scale)
// or the decode factor (a side without one counts 1 here: its scale_inv is in host_alpha), [1] = beta.
MXKIT_GLOBAL void device_alpha_beta_kernel(const float* scale_a, const float* scale_b, const float* decode_a, const float* decode_b,
                                           float host_alpha, float beta, float* alpha_beta) {
  const float fa = scale_a ? 1.0f / *scale_a : (decode_a ? *decode_a : 1.0f);
  const float fb = scale_b ? 1.0f / *scale_b : (decode_b ? *decode_b : 1.0f);
  alpha_beta[0] = (fa * fb) * host_alpha;
  alpha_beta[1] = beta;
}
#endif

struct gemm_arch {
  static constexpr gemm_path path = gemm_path::vendor;
  // The operands (types, layouts, alignment), the device (bf16: sm_80 and newer; FP8: sm_89 and
  // newer) and the library (it loads).
  static bool supports(const gemm_operand& a, const gemm_operand& b) {
    if (!operands_fit(a, b)) return false;
    const device_info dev = current_device();
    if (dev.capability < (a.kind == operand_kind::fp8 ? 89 : 80)) return false;
    return cublaslt::available();
  }
  // The output too (gemm.hpp asks where an architecture has this): its layout, and whether the
  // heuristic has an algorithm for the whole problem (answered once per problem, then cached).
  // A library call that fails here (the handle cannot be created: no memory left, a sticky
  // device error) answers no: `automatic` then takes mxkit's kernels, and a device error shows at
  // their launch.
  static bool supports_output(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out) {
    const device_info dev = current_device();
    const problem_key k = make_key(a, b, out, dev.device);
    if (!output_fits(k, out)) return false;
    try {
      return choose_algo(k).found;
    } catch (const std::exception&) {
      return false;
    }
  }
#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
  static void run(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s, const gemm_options&) {
    const device_info dev = current_device();
    const problem_key k = make_key(a, b, out, dev.device);
    const algo_choice choice = choose_algo(k);
    mxkit::detail::require(output_fits(k, out) && choice.found, "gemm (vendor): cuBLASLt has no algorithm for this product");
    // Scratch: [workspace | alpha, beta] (the second part only with device scales), each part
    // 256-byte aligned.
    const std::size_t workspace = (choice.workspace + 255) / 256 * 256;
    const std::size_t bytes = workspace + (k.device_alpha ? 256 : 0);
    auto* scratch = static_cast<std::uint8_t*>(bytes ? allocate_async(bytes, s) : nullptr);
    try {
      // Host descales (FP8) and factors (bf16: 1 but for NVFP4's tensor scales) fold into alpha,
      // as the reference forms them (a.scale_inv * b.scale_inv).
      auto host_factor = [](const gemm_operand& o) { return o.scale || o.decode_scale ? 1.0f : o.scale_inv; };
      const float alpha = out.alpha * (host_factor(a) * host_factor(b));
      const float beta = out.beta;
      const void* alpha_arg = &alpha;
      const void* beta_arg = &beta;
      if (k.device_alpha) {
        auto* alpha_beta = reinterpret_cast<float*>(scratch + workspace);
        device_alpha_beta_kernel<<<1, 1, 0, s>>>(a.scale, b.scale, a.decode_scale, b.decode_scale, alpha, beta, alpha_beta);
        MXKIT_GPU_CHECK_LAUNCH();
        alpha_arg = alpha_beta;
        beta_arg = alpha_beta + 1;
      }
      const descriptors desc(k);
      const void* c = k.beta ? out.c : out.d;
      cublaslt::check(cublaslt::library().matmul(handle(k.device), desc.op(), alpha_arg, b.data, desc.a(), a.data, desc.b(), beta_arg, c,
                                                 desc.c(), out.d, desc.d(), &choice.algo, choice.workspace ? scratch : nullptr,
                                                 choice.workspace, s),
                      "cublasLtMatmul");
    } catch (...) {
      deallocate_async(scratch, s);
      throw;
    }
    deallocate_async(scratch, s);
  }
#endif
};

}  // namespace vendor
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
