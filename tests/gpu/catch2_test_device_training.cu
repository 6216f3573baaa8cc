// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a (built for sm_90a beside the generic targets, so the backend's GEMMs take the sm90
// tensor-core path on an H100/H200, as the project's other Hopper tests)
// gpu::device_backend training whole models, against ref::host_backend where both run
// (catch2_test_device_backend.cu checks the operations one at a time):
//  1. A warm training step allocates nothing from the driver and never synchronizes.
//  2. Twenty training steps of a 2-layer model (d_model 128, 2 heads, 1 KV head, head_dim 64,
//     ffn 256, bytes, seq 64, batch 2, bf16 activations) for every recipe (NVFP4 too), and a LoRA fine-tune
//     that heals from MXFP4 to FP8, on both backends: the losses agree (tolerances below; both
//     series are printed).
//  4. Step graphs (train/step_replay.hpp, gpu/nn/device_step_graph.hpp): a run whose steps are
//     recorded once and replayed gives the launched run's losses, parameters, moments and step
//     counts byte for byte, and went through the graph (the backend's capture and replay
//     counters); a step of another batch shape falls back to launching and the shape after it is
//     recorded again, with the same bits; recipes with per-step random draws are refused.
//  3. Two identical device runs give the same losses bit for bit; LoRA leaves the frozen base
//     weights bit-identical; after healing no MXFP4 copy remains and the weight sets were never
//     co-resident, in the tracker's figures and in the device's own (the pool's in-use bytes,
//     its high-water mark during the switch, the runtime's free memory; printed).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/healing.hpp>
#include <mxkit/train/training.hpp>
#include <mxkit/host/host_backend.hpp>

#include "../catch.hpp"
#include "../nn/backend_conformance.hpp"

using namespace backend_conformance;  // same_values; nn_test: mxkit, mxkit::nn, host_backend

namespace {

namespace g = mxkit::gpu;
using g::device_backend;

// ------------------------------------------------------------------------------------ models

// The device attention takes head_dim 64 and 128: d_model 128 over 2 heads, one KV head.
model_config small_model() {
  model_config c;
  c.vocab = 256;
  c.n_layers = 2;
  c.layer = {128, 2, 1, 256};
  return c;
}
train_config run_config(std::size_t steps) {
  train_config c;
  c.steps = steps;
  c.shape = {2, 64};
  // Peak 3e-3: at 1e-2 this small model trains through loss spikes from step 10 on, and a spike
  // turns a last-bit difference between the backends into a 37 % loss gap at one step (measured
  // on the H200: every recipe agreed within 0.6 % for 8 steps, then spiked apart). Agreement is
  // only a meaningful test of a trajectory that is not chaotic.
  c.schedule = {3e-3, 3e-4, std::min<std::size_t>(3, steps - 1), steps};  // the cosine needs total > warmup
  c.log_every = 1;
  return c;
}

template <class Backend>
std::vector<double> train(const recipe& r, std::size_t steps) {
  Backend be;
  model m(be, small_model(), r, 17);
  trainer t(m, text_tokens(), run_config(steps));
  t.run();
  return t.losses();
}

std::string loss_table(const std::vector<double>& h, const std::vector<double>& d) {
  std::ostringstream s;
  s << std::setprecision(8);
  for (std::size_t i = 0; i < h.size() && i < d.size(); ++i)
    s << "\n  step " << std::setw(2) << i + 1 << "  host " << std::setw(11) << h[i] << "  device " << std::setw(11) << d[i]
      << "  (device - host) / host " << std::setprecision(3) << (d[i] - h[i]) / h[i] << std::setprecision(8);
  return s.str();
}

// Losses agree step by step: relative first_tol at the first step, tol after it. Returns the
// number of steps outside.
std::size_t losses_outside(const std::vector<double>& h, const std::vector<double>& d, double first_tol, double tol) {
  std::size_t bad = h.size() == d.size() ? 0 : 1;
  for (std::size_t i = 0; i < h.size() && i < d.size(); ++i)
    if (!(std::fabs(d[i] - h[i]) <= (i == 0 ? first_tol : tol) * std::fabs(h[i]))) ++bad;
  return bad;
}

// ------------------------------------------------------------------------- device memory

// mxkit's pool (gpu/memory.hpp) in-use bytes and their high-water mark since the last reset.
std::size_t pool_used(bool high) {
  std::uint64_t v = 0;
#if MXKIT_GPU_HIP
  MXKIT_GPU_CHECK(hipMemPoolGetAttribute(g::detail::device_pool(), high ? hipMemPoolAttrUsedMemHigh : hipMemPoolAttrUsedMemCurrent, &v));
#else
  MXKIT_GPU_CHECK(
      cudaMemPoolGetAttribute(g::detail::device_pool(), high ? cudaMemPoolAttrUsedMemHigh : cudaMemPoolAttrUsedMemCurrent, &v));
#endif
  return static_cast<std::size_t>(v);
}
void reset_pool_used_high() {
  std::uint64_t zero = 0;  // 0 resets the mark to the current use
#if MXKIT_GPU_HIP
  MXKIT_GPU_CHECK(hipMemPoolSetAttribute(g::detail::device_pool(), hipMemPoolAttrUsedMemHigh, &zero));
#else
  MXKIT_GPU_CHECK(cudaMemPoolSetAttribute(g::detail::device_pool(), cudaMemPoolAttrUsedMemHigh, &zero));
#endif
}

// What the device and the tracker hold at one phase of the switch (after the stream drained).
struct memory_phase {
  std::string name;
  double driver_free, pool_reserved, pool_used, tracked_total, tracked_weight;
  std::size_t live_mx;
};
memory_phase measure(const std::string& name, device_backend& be) {
  be.synchronize();
  const g::device_memory_info mi = g::memory_info();
  return {name,
          static_cast<double>(mi.free_bytes),
          static_cast<double>(g::pool_reserved_bytes()),
          static_cast<double>(pool_used(false)),
          static_cast<double>(be.memory().total()),
          static_cast<double>(be.memory().weight_bytes()),
          be.live_copies(precision::mx)};
}
std::string phase_table(const std::vector<memory_phase>& ps) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(3);
  s << "\n  phase                   driver free MiB  pool reserved MiB  pool in use MiB  tracked MiB  tracked weights MiB  live MXFP4";
  for (const memory_phase& p : ps)
    s << "\n  " << std::left << std::setw(24) << p.name << std::right << std::setw(15) << p.driver_free / 1048576 << std::setw(19)
      << p.pool_reserved / 1048576 << std::setw(17) << p.pool_used / 1048576 << std::setw(13) << p.tracked_total / 1048576
      << std::setw(21) << p.tracked_weight / 1048576 << std::setw(12) << p.live_mx;
  return s.str();
}

// Every frozen parameter's values that still has a master copy.
std::vector<std::vector<double>> frozen_values(backend& be, model& m) {
  std::vector<std::vector<double>> out;
  for (parameter* p : m.parameters())
    if (!p->trainable && p->value.defined()) out.push_back(be.read(p->value));
  return out;
}
// The frozen parameters and their values now, to compare with later ones: those whose master
// the healing stash released (the linears) can no longer be read and are skipped then.
using frozen_record = std::vector<std::pair<parameter*, std::vector<double>>>;
frozen_record record_frozen(backend& be, model& m) {
  frozen_record out;
  for (parameter* p : m.parameters())
    if (!p->trainable && p->value.defined()) out.emplace_back(p, be.read(p->value));
  return out;
}
// How many of the recorded parameters still have a master, and whether all of those are unchanged.
std::pair<std::size_t, bool> compare_frozen(backend& be, const frozen_record& r) {
  std::size_t n = 0;
  bool same = true;
  for (const auto& [p, v] : r)
    if (p->value.defined()) {
      ++n;
      same = same && be.read(p->value) == v;
    }
  return {n, same};
}
// Everything a run leaves on the device that the next step reads, as bytes: every parameter,
// the optimizer's moments and its step counts (read as doubles, which every f32 and bf16 value is
// exactly; compared with memcmp, so -0 and 0 or two NaNs differ).
struct device_state {
  std::vector<double> losses;
  std::vector<std::vector<double>> tensors;
};
device_state state_of(backend& be, model& m, adamw& opt, std::vector<double> losses) {
  device_state out{std::move(losses), {}};
  for (parameter* p : m.parameters()) out.tensors.push_back(be.read(p->value));
  for (const adamw::slot& s : opt.slots()) {
    out.tensors.push_back(be.read(s.m));
    out.tensors.push_back(be.read(s.v));
  }
  out.tensors.push_back({static_cast<double>(opt.steps()), static_cast<double>(opt.skipped_steps())});
  return out;
}
bool same_bytes(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}
// "" when both states are the same bytes, else what differs first.
std::string state_difference(const device_state& graphed, const device_state& launched) {
  if (!same_bytes(graphed.losses, launched.losses)) return "losses: " + same_values("losses", graphed.losses, launched.losses);
  if (graphed.tensors.size() != launched.tensors.size()) return "tensor counts differ";
  for (std::size_t i = 0; i < graphed.tensors.size(); ++i)
    if (!same_bytes(graphed.tensors[i], launched.tensors[i])) return "tensor " + std::to_string(i) + " (parameters, then m and v per slot, then the step counts)";
  return "";
}

struct graphed_run {
  device_state state;
  std::uint64_t captures = 0, replays = 0;
  std::size_t launches = 0;
  std::string refusal;
};
// `steps` trainer steps with the step graph on or off.
graphed_run train_graphed(const recipe& r, std::size_t steps, bool graph) {
  device_backend be;
  model m(be, small_model(), r, 17);
  train_config c = run_config(steps);
  c.step_graph = graph;
  trainer t(m, text_tokens(), c);
  t.run();
  return {state_of(be, m, t.optimizer(), t.losses()), be.counters().graph_captures, be.counters().graph_replays,
          t.steps().counters().launches, t.steps().refusal()};
}

// A loop of its own over a sequence of batch shapes through nn::step_replay (the trainer's
// batches all have one shape): per shape its own token tensors, uploaded before each step; the
// learning rate from a device scalar; the loss read after every step.
graphed_run shapes_run(const recipe& r, const std::vector<batch_shape>& shapes, bool graph) {
  device_backend be;
  model m(be, small_model(), r, 17);
  adamw opt(be, m.parameters(), adamw_config{});
  tensor lr = be.scalar(mem_tag::optimizer), loss = be.scalar();
  opt.set_lr_device(&lr);
  step_replay replay(be, graph ? "" : "off in this run");
  struct batch_tensors {
    std::unique_ptr<batch_loader> loader;
    tensor tokens, targets;
  };
  std::map<std::pair<std::size_t, std::size_t>, batch_tensors> by_shape;
  std::vector<double> losses;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const batch_shape s = shapes[i];
    batch_tensors& bt = by_shape[{s.batch, s.seq}];
    if (!bt.loader) {
      bt.loader = std::make_unique<batch_loader>(text_tokens(), s, 5);
      bt.tokens = be.alloc(s.tokens(), 1, dtype::i32, mem_tag::activation);
      bt.targets = be.alloc(s.tokens(), 1, dtype::i32, mem_tag::activation);
    }
    const batch b = bt.loader->at(i);
    be.write_tokens(bt.tokens, b.inputs, 256);
    be.write_tokens(bt.targets, b.targets, 256);
    const double step_lr = 2e-3 / static_cast<double>(i + 1);  // changes every step: read from `lr` on the device
    be.fill(lr, step_lr);
    const std::uint64_t before = be.counters().graph_replays;
    replay.run({s.batch, s.seq, false}, [&] {
      m.zero_grad();
      be.axpy(1.0, m.forward(bt.tokens, bt.targets, s, true), loss);
      m.backward();
      opt.step(step_lr);
      m.end_step();
    });
    if (be.counters().graph_replays != before) {  // the host side of the replayed step
      opt.bump_versions();
      m.set_step(i + 1);
    }
    losses.push_back(be.read_scalar(loss));
    be.fill(loss, 0.0);
  }
  return {state_of(be, m, opt, losses), be.counters().graph_captures, be.counters().graph_replays, replay.counters().launches,
          replay.refusal()};
}
}  // namespace

// ====================================================================== 1. a warm step on the device

TEST_CASE("device backend: a warm training step allocates nothing from the driver and never waits", "[gpu][nn][backend]") {
  // As tests/nn/catch2_test_backend.cpp: the first steps fill the pool (the second places the
  // optimizer's descriptor arrays, made in the first, beside activations of the same sizes); from
  // the third on a step of the same shapes takes every block from the pool. Reads only at the
  // logging step, no synchronize() at all.
  // NVFP4: its tensor scales stay in device memory, from the quantizer to the GEMM's epilogue.
  for (const recipe& r : {with_bf16(recipes::fp8_delayed({4, amax_algorithm::max, 0})), with_bf16(recipes::mxfp4_nvidia_style()),
                          with_bf16(recipes::bf16()), with_bf16(recipes::nvfp4())}) {
    INFO(r.name);
    g::trim_device_memory();  // the pool starts from what is in use: earlier tests' blocks do not hide a growth
    device_backend be;
    model m(be, small_model(), r, 3);
    train_config c = run_config(6);
    c.log_every = 6;
    trainer t(m, text_tokens(), c);
    std::vector<std::uint64_t> reads, driver;
    const std::uint64_t syncs = be.counters().synchronizations;
    for (int i = 0; i < 6; ++i) {
      const std::uint64_t h0 = be.counters().host_reads, d0 = be.counters().driver_allocations;
      t.step();
      reads.push_back(be.counters().host_reads - h0);
      driver.push_back(be.counters().driver_allocations - d0);
    }
    std::ostringstream s;
    for (std::size_t i = 0; i < driver.size(); ++i) s << " " << driver[i];
    WARN(r.name << ": driver allocations per step:" << s.str());
    CHECK(reads == std::vector<std::uint64_t>{0, 0, 0, 0, 0, 1});
    for (std::size_t i = 2; i < driver.size(); ++i) CHECK(driver[i] == 0);
    CHECK(be.counters().synchronizations == syncs);
    REQUIRE(t.losses().size() == 1);
    CHECK(std::isfinite(t.losses()[0]));
  }
}

// ================================================================= 2. training on both backends

TEST_CASE("device backend: twenty training steps of every recipe agree with the host backend", "[gpu][nn][backend][training]") {
  // The first step starts from the same weights and data, so its loss differs only by the
  // rounding of the two backends' kernels (bf16 activations: a few bf16 ulps of the logits, then
  // averaged): relative 5e-3. After it the updates feed back the differences (and quantizers
  // with a threshold, MX and FP8, round some elements the other way), so the trajectories drift
  // apart without a direction:
  //   bf16, FP8         every step within 2e-2, the 20-step mean loss within 1e-2
  //   MXFP8             the first 8 steps within 2e-2, every step within 4e-2, the mean within
  //                     1e-2: a last-bit difference can move a block's shared scale, and where
  //                     the loss falls fastest (steps 12-15 here) that shows in one batch
  //   MXFP4             a last-bit difference in an activation moves an element by a whole FP4
  //                     step (up to a third of its value), and where the loss falls fastest
  //                     (steps 9-12 here) one batch's loss can differ by a tenth: the first 8
  //                     steps within 4e-2, every step within 0.15, the mean within 2e-2.
  // Measured on the H200 (lr 3e-3; the device runs are bit-reproducible, so these are the
  // numbers every run gives there), with the attention kernels of 2026-11-24: bf16 at most 0.2 %
  // at a step, FP8 0.9 %, MXFP8 0.09 % in the first 8 steps, 2.5 % at step 13 and 0.5 % on the
  // mean; earlier kernels gave the MXFP4 variants at most 2.3 % in the first 8 steps, 11.9 % at
  // one step (no Hadamard, step 10) and 0.8 % on the mean. Both series are printed.
  recipes::mxfp4_config per_gemm;  // MXFP4 forward and wgrad, dgrad in bf16: the per-GEMM switch
  per_gemm.dgrad_mx = false;
  for (const recipe& r0 : {recipes::bf16(), recipes::fp8_delayed(), recipes::mxfp8(), recipes::mxfp4_amd(), recipes::mxfp4_nvidia_style(),
                           recipes::mxfp4_primus_turbo(), recipes::mxfp4_no_hadamard(), recipes::mxfp4(per_gemm, "mxfp4 (bf16 dgrad)"),
                           recipes::nvfp4(small_model().n_layers)}) {
    const recipe r = with_bf16(r0);
    INFO(r.name);
    const std::vector<double> lh = train<host_backend>(r, 20), ld = train<device_backend>(r, 20);
    WARN(r.name << ", 20 steps, bf16 activations:" << loss_table(lh, ld));
    REQUIRE(lh.size() == 20);
    REQUIRE(ld.size() == 20);
    // NVFP4 (the paper's recipe: layer 0 in NVFP4, layer 1 in bf16) is held to MXFP4's bounds: an
    // FP4 element moves by a whole step on a last-bit difference as well.
    const bool mx = r.uses(precision::mx),
               fp4 = mx && r.fprop.a.is<block_scaled_spec>() &&
                     (r.fprop.a.block_scaled().format == formats::mxfp4 || r.fprop.a.block_scaled().is_nvfp4());
    const std::vector<double> h8(lh.begin(), lh.begin() + 8), d8(ld.begin(), ld.begin() + 8);
    CHECK(losses_outside(h8, d8, 5e-3, fp4 ? 4e-2 : 2e-2) == 0);
    CHECK(losses_outside(lh, ld, 5e-3, fp4 ? 0.15 : mx ? 4e-2 : 2e-2) == 0);
    const double mean_h = std::accumulate(lh.begin(), lh.end(), 0.0) / 20, mean_d = std::accumulate(ld.begin(), ld.end(), 0.0) / 20;
    CHECK(std::fabs(mean_d - mean_h) <= (fp4 ? 2e-2 : 1e-2) * mean_h);
    CHECK(ld.back() < ld.front() - 0.5);  // and it trains
  }
}

namespace {
struct lora_outcome {
  std::vector<double> pre, lora;
  std::optional<healing_report> report;
  std::size_t live_mx = 0;
  bool base_unchanged = false;
  std::size_t bf16_dgrad_copy_bytes = 0;  // the cached bf16 columnwise weight copies (the head's)
};
// 10 bf16 steps from random weights, then a LoRA fine-tune under MXFP4 (AMD's recipe) that heals
// to FP8 before step 10 of 20 (catch2_test_training.cpp's healing test at the small model's size).
template <class Backend>
lora_outcome lora_healing_run() {
  Backend be;
  model m(be, small_model(), with_bf16(recipes::bf16()), 17);
  lora_outcome o;
  {
    trainer pre(m, text_tokens(), run_config(10));
    pre.run();
    o.pre = pre.losses();
  }
  m.set_recipe(with_bf16(recipes::mxfp4_amd()));
  m.freeze_all();
  m.add_lora({}, {8, 16.0}, 3);
  const frozen_record frozen = record_frozen(be, m);  // the linears' masters go at the stash
  train_config c = run_config(20);
  c.heal_step = 10;
  c.heal_recipe = with_bf16(recipes::fp8_healing());
  trainer t(m, text_tokens(), c);
  t.run();
  o.lora = t.losses();
  o.report = t.healing();
  o.live_mx = be.live_copies(precision::mx);
  std::vector<linear*> ls = m.linears();
  ls.push_back(&m.head());
  for (const linear* l : ls)
    if (l->cached_columnwise().defined() && l->cached_columnwise().kind() == precision::bf16) o.bf16_dgrad_copy_bytes += l->cached_columnwise().bytes();
  const auto [kept, same] = compare_frozen(be, frozen);
  o.base_unchanged = kept > 0 && same;  // embedding, norms, head
  return o;
}
}  // namespace

TEST_CASE("device backend: LoRA with MXFP4 -> FP8 healing agrees with the host backend", "[gpu][nn][backend][training][healing]") {
  // Tolerances as for the recipes: relative 5e-3 at the first step of each run, 2e-2 after.
  const lora_outcome h = lora_healing_run<host_backend>(), d = lora_healing_run<device_backend>();
  WARN("bf16 pre-training, 10 steps:" << loss_table(h.pre, d.pre));
  WARN("LoRA, MXFP4 -> FP8 healing before step 11, 20 steps:" << loss_table(h.lora, d.lora));
  CHECK(losses_outside(h.pre, d.pre, 5e-3, 2e-2) == 0);
  CHECK(losses_outside(h.lora, d.lora, 5e-3, 2e-2) == 0);
  REQUIRE(d.report.has_value());
  REQUIRE(h.report.has_value());
  CHECK(d.report->restored_linears == 8);  // 2 layers x 4 linears
  CHECK(d.report->peak_weight_bytes < d.report->co_resident_bytes);
  CHECK(d.live_mx == 0);
  CHECK(d.base_unchanged);
  // The tracker's figures are the backends' alike (both count codes, scales and FP8 scales the
  // same way), but for the bf16 dgrad copy of a weight: the device's is its rowwise copy's bytes
  // read MN-major, no bytes of its own.
  CHECK(h.bf16_dgrad_copy_bytes > 0);
  CHECK(d.bf16_dgrad_copy_bytes == 0);
  const std::size_t aliased = h.bf16_dgrad_copy_bytes;
  CHECK(d.report->weight_bytes_before + aliased == h.report->weight_bytes_before);
  CHECK(d.report->weight_bytes_after + aliased == h.report->weight_bytes_after);
  CHECK(d.report->peak_weight_bytes + aliased == h.report->peak_weight_bytes);
  CHECK(d.report->co_resident_bytes + aliased == h.report->co_resident_bytes);
  CHECK(std::isfinite(d.lora.back()));
}

// ======================================================== 3. determinism, frozen weights, healing

TEST_CASE("device backend: two identical runs give the same losses, bit for bit", "[gpu][nn][backend][training]") {
  for (const recipe& r0 : {recipes::bf16(), recipes::fp8_delayed({4, amax_algorithm::max, 0}), recipes::mxfp8(), recipes::mxfp4_amd(),
                           recipes::mxfp4_nvidia_style(), recipes::nvfp4(small_model().n_layers)}) {
    const recipe r = with_bf16(r0);
    INFO(r.name);
    const std::vector<double> a = train<device_backend>(r, 8), b = train<device_backend>(r, 8);
    REQUIRE(a.size() == 8);
    CHECK(same_values("losses", b, a) == "");
  }
}

TEST_CASE("device backend: LoRA leaves the frozen base weights bit-identical", "[gpu][nn][backend][training]") {
  device_backend be;
  model m(be, small_model(), with_bf16(recipes::mxfp4_amd()), 7);
  m.freeze_all();
  m.add_lora({}, {8, 16.0}, 3);
  const std::vector<std::vector<double>> before = frozen_values(be, m);
  REQUIRE(before.size() == m.parameters().size() - 2 * 2 * 2);  // all but the adapters (A, B of qkv and out, 2 layers)
  trainer t(m, text_tokens(), run_config(6));
  t.run();
  CHECK(frozen_values(be, m) == before);
  CHECK(be.counters().copies(operand_use::wgrad_x) == 0);  // frozen weights: no wgrad operand
  bool adapters_moved = false;
  for (parameter* p : m.trainable_parameters())
    for (const double v : be.read(p->value)) adapters_moved = adapters_moved || (p->name.find("lora_b") != std::string::npos && v != 0.0);
  CHECK(adapters_moved);
}

TEST_CASE("device backend: healing frees every MXFP4 copy before the FP8 copies arrive, measured on the device", "[gpu][nn][backend][healing]") {
  // A model with weights large enough to see on the device (2 layers, d_model 512, d_ff 1536:
  // 6.0 M frozen weights, 11.5 MiB of FP8 copies, 6.1 MiB of MXFP4 copies), LoRA on QKV and out.
  // Device figures per phase, after the stream drained: the runtime's free memory, the pool's
  // reserved and in-use bytes; printed next to the tracker's.
  // Checks (slack: 2 MiB, plus a quarter of the change, for the pool's rounding of ~40 allocations):
  //  - the pool's in-use bytes follow the tracker: (used - tracked) moves by at most the slack
  //    between phases (everything the backend holds is tracked, nothing else uses the pool);
  //  - the runtime's free memory fell by at most what the pool reserved since (+ 16 MiB for
  //    kernels loaded lazily on first use): no device memory outside the pool;
  //  - pass 1 leaves no MXFP4 copy and less memory in use; the real heal()'s peak of the pool's
  //    in-use bytes (the driver's high-water mark) stays below the in-use bytes before the switch
  //    plus the FP8 copies: the two weight sets were never on the device together (a co-resident
  //    switch would reach at least that), and the healing report says the same in tracked bytes.
  model_config c;
  c.vocab = 256;
  c.n_layers = 2;
  c.layer = {512, 8, 2, 1536};
  const recipe fp4_recipe = with_bf16(recipes::mxfp4_amd()), target = with_bf16(recipes::fp8_healing());
  const double mib = 1048576.0;
  auto slack = [&](double change) { return 2 * mib + std::fabs(change) / 4; };
  auto consistent = [&](const memory_phase& a, const memory_phase& b) {
    INFO(a.name << " -> " << b.name);
    const double moved = (b.pool_used - b.tracked_total) - (a.pool_used - a.tracked_total);
    CHECK(std::fabs(moved) <= slack(b.tracked_total - a.tracked_total));
    CHECK(a.driver_free - b.driver_free <= std::max(0.0, b.pool_reserved - a.pool_reserved) + 16 * mib);
  };
  SECTION("the switch as heal() runs it") {
    device_backend be;
    model m(be, c, fp4_recipe, 5);
    m.freeze_all();
    m.add_lora({}, {8, 16.0}, 3);
    const frozen_record frozen = record_frozen(be, m);
    const fp8_weight_stash stash = prepare_healing(m);
    {
      trainer t(m, text_tokens(), run_config(3));
      t.run();
      CHECK(std::isfinite(t.losses().back()));
    }
    CHECK(be.live_copies(precision::mx) > 0);
    be.synchronize();
    g::trim_device_memory();  // the pool gives back what it keeps unused: reserved ~ in use
    const memory_phase p0 = measure("before the switch", be);
    reset_pool_used_high();
    const healing_report rep = heal(m, stash, target);
    const double peak_used = static_cast<double>(pool_used(true));
    const memory_phase p2 = measure("after heal()", be);
    const double restored = static_cast<double>(rep.co_resident_bytes - rep.weight_bytes_before);
    WARN("heal(): device memory" << phase_table({p0, p2}) << "\n  pool in-use peak during heal(): " << std::fixed << std::setprecision(3)
                                 << peak_used / mib << " MiB (" << (peak_used - p0.pool_used) / mib << " MiB above the start)"
                                 << "\n  tracker: weights before " << rep.weight_bytes_before / mib << " MiB, dropped to "
                                 << rep.weight_bytes_dropped / mib << ", after " << rep.weight_bytes_after / mib << ", peak "
                                 << rep.peak_weight_bytes / mib << ", co-resident would be " << rep.co_resident_bytes / mib
                                 << "; FP8 copies restored " << restored / mib << " MiB");
    CHECK(p2.live_mx == 0);
    CHECK(rep.restored_linears == 8);
    CHECK(rep.peak_weight_bytes < rep.co_resident_bytes);
    CHECK(rep.peak_weight_bytes == std::max(rep.weight_bytes_before, rep.weight_bytes_after));
    CHECK(peak_used - p0.pool_used < restored);
    CHECK(peak_used - p0.pool_used <= std::max(0.0, p2.pool_used - p0.pool_used) + slack(restored));
    consistent(p0, p2);
    {
      trainer t(m, text_tokens(), run_config(3));  // FP8 training continues, free of MXFP4
      t.run();
      CHECK(std::isfinite(t.losses().back()));
    }
    CHECK(be.live_copies(precision::mx) == 0);
    const auto [kept, same] = compare_frozen(be, frozen);
    CHECK(kept == 2 * c.n_layers + 3);  // the masters left: embedding, two norms a layer, final norm, head
    CHECK(same);  // frozen: bit-identical through MXFP4, the switch and FP8
  }
  SECTION("the two passes one at a time") {
    // heal()'s two passes written out (nn/healing.hpp), to measure between them.
    device_backend be;
    model m(be, c, fp4_recipe, 5);
    m.freeze_all();
    m.add_lora({}, {8, 16.0}, 3);
    const fp8_weight_stash stash = prepare_healing(m);
    {
      trainer t(m, text_tokens(), run_config(3));
      t.run();
    }
    be.synchronize();
    g::trim_device_memory();
    const memory_phase p0 = measure("before the switch", be);
    m.set_recipe(target);  // pass 1: every MXFP4 copy dropped, fresh FP8 scaling state
    const memory_phase p1 = measure("after pass 1", be);
    for (linear* l : m.linears())  // pass 2: the stashed FP8 copies uploaded, their transposes made
      if (!l->has_master()) l->restore_fp8(be.import_fp8(stash.find(l->name()), operand_use::fprop_w, mem_tag::quantized_weight));
    const memory_phase p2 = measure("after pass 2", be);
    WARN("healing passes: device memory" << phase_table({p0, p1, p2}));
    CHECK(p0.live_mx > 0);
    CHECK(p1.live_mx == 0);
    CHECK(p1.tracked_weight < p0.tracked_weight);
    CHECK(p1.pool_used < p0.pool_used);
    CHECK(p2.tracked_weight > p1.tracked_weight);
    consistent(p0, p1);
    consistent(p1, p2);
    consistent(p0, p2);
    for (linear* l : m.linears()) {
      CHECK(l->cached_rowwise().kind() == precision::fp8);
      CHECK(l->cached_columnwise().kind() == precision::fp8);
    }
  }
}

// ====================================================================== 4. step graphs

TEST_CASE("device backend: a replayed step graph gives the launched steps' bits", "[gpu][nn][backend][training][graph]") {
  constexpr std::size_t steps = 8;
  for (const recipe& r0 : {recipes::bf16(), recipes::fp8_delayed({4, amax_algorithm::max, 0}), recipes::mxfp8(), recipes::mxfp4_amd()}) {
    const recipe r = with_bf16(r0);
    INFO(r.name);
    const graphed_run launched = train_graphed(r, steps, false), graphed = train_graphed(r, steps, true);
    // The launched run recorded nothing; the graphed one launched the first two steps (the
    // second measured: the recording's memory block), recorded the third and replayed every
    // step after it.
    CHECK(launched.captures == 0);
    CHECK(launched.replays == 0);
    CHECK(launched.launches == steps);
    REQUIRE(graphed.refusal == "");
    CHECK(graphed.captures == 1);
    CHECK(graphed.replays == steps - 3);
    CHECK(graphed.launches == 2);
    REQUIRE(graphed.state.losses.size() == steps);
    CHECK(state_difference(graphed.state, launched.state) == "");
  }
}

TEST_CASE("device backend: a step of another shape falls back to launching, with the same bits", "[gpu][nn][backend][training][graph]") {
  // Four steps of 2 x 64, a short batch of 1 x 64 (the last short batch of an epoch), three of
  // 2 x 64 again: launched twice, recorded, replayed; launched (another shape: the recording is
  // dropped); launched twice (the warm-up of the shape), recorded.
  const batch_shape full{2, 64}, short_batch{1, 64};
  const std::vector<batch_shape> shapes{full, full, full, full, short_batch, full, full, full};
  for (const recipe& r0 : {recipes::bf16(), recipes::fp8_delayed({4, amax_algorithm::max, 0})}) {
    const recipe r = with_bf16(r0);
    INFO(r.name);
    const graphed_run launched = shapes_run(r, shapes, false), graphed = shapes_run(r, shapes, true);
    CHECK(launched.captures == 0);
    CHECK(launched.launches == shapes.size());
    CHECK(graphed.captures == 2);
    CHECK(graphed.replays == 1);
    CHECK(graphed.launches == 5);
    CHECK(state_difference(graphed.state, launched.state) == "");
  }
}

TEST_CASE("device backend: recipes with per-step random draws launch every step", "[gpu][nn][backend][training][graph]") {
  // mxfp4_nvidia_style and the NVFP4 recipe: stochastic rounding, random Hadamard signs.
  for (const recipe& r0 : {recipes::mxfp4_nvidia_style(), recipes::nvfp4(small_model().n_layers)}) {
    const recipe r = with_bf16(r0);
    INFO(r.name);
    const graphed_run run = train_graphed(r, 4, true);
    CHECK(run.refusal.find("Philox") != std::string::npos);
    CHECK(run.captures == 0);
    CHECK(run.replays == 0);
    CHECK(run.launches == 4);
  }
}
