// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hopper (sm_90a) GEMM on tensor cores: D[P,Q] = alpha * A.B^T + beta * C with A [P,R], B [Q,R]
// K-major, FP8 (E4M3 or E5M2, any mix) or bf16, in one of three scalings (enum scaling):
//   block   MX as stored: one E8M0 scale per 32-block on each side. Each block is one
//           m64n64k32 wgmma into a fresh fp32 fragment P, promoted in registers:
//           acc += (P * sb[col]) * sa[row]. MXFP6 (and MXFP4 lines that cannot fold) run here
//           after a byte expansion to E4M3 (expand.hpp); MXINT8 stays on the portable kernel.
//   line    MXFP4 folded into E5M2 bytes with one factor per line (expand::fold): the same
//           per-block wgmmas and fresh fragments, so every block sum stays exact, but the
//           promotion is a plain add and the factors multiply once in the epilogue. G = 4
//           lets the tensor core sum four blocks first (gemm_options::exact_block_sums).
//   tensor  per-tensor FP8: four k32 wgmmas (128 K) accumulate in the tensor core, then
//           acc += P; the descale multiplies the final sum (as cuBLASLt's default, not its
//           "fast accumulation" mode, promotes periodically). bf16 (also MXFP8 expanded with its
//           scales applied, expand::to_bf16) accumulates all of K in the tensor core with
//           m64n256k16 wgmmas: bf16 products and sums keep fp32 precision.
//
// Why block scaling is slow on Hopper (DeepGEMM promotes every 128 K with one scale per 128x128
// tile; its Hopper MXFP8 kernel waits for every k32 wgmma and spends 3 FP32 ops per element-block
// with scales read as bytes): MX puts a different scale on every (row, block) and (column, block),
// so each accumulator needs (P*sb)*sa per 32 K, 2 FP32 instructions per element per block, more
// issue time than the FP8 MMA itself (an SM does 4096 FP8 FMA per clock but 128 FP32 lanes), and
// the scale loads from shared memory sit on the critical path. The line and tensor scalings
// remove the per-block scales, which is why MXFP4 and MXFP8 default to them. In block mode:
//  - scales are converted once, by the producer warpgroup, to floats in shared memory, laid out
//    (column_slot) so each consumer thread's 16 column scales of a 64-column sub-tile are 4
//    conflict-free LDS.128 and its two row scales two LDS.32; the bytes are fetched a stage ahead;
//  - each consumer warpgroup owns 64 x 256 outputs as four 64x64 sub-tiles and keeps two P
//    fragments: the wgmma of sub-tile n+1 is issued before sub-tile n is promoted;
//  - each 128-byte K stage is straight-line code that drains its wgmmas at the end (a result
//    live across the loop's back edge makes ptxas serialize every wgmma);
//  - operands arrive by TMA (128-byte swizzle, 4 stages of 128 bytes of K) from one producer
//    thread, the producer warpgroup keeping 40 registers (setmaxnreg) so consumers get 232.
// Throughput of each route against cuBLAS: docs/perf/gemm.md and bench/RESULTS.md.
// bf16 operands may also be MN-major (major_order::mn_major: wgrad's dY and X as stored), loaded
// as 64-line panels and read with wgmma's transpose bits, so wgrad needs no transposed copies.
// Tile 128 x 256 (2 consumer warpgroups x 64 rows), 384 threads, ~216 KB shared memory, one CTA
// per SM, grouped raster order for L2 reuse, tiles handed out in a fixed or (with a counter) a
// dynamic order. A closed launch_gate makes the kernel return at once (a fast path and its
// fallback are both enqueued; gemm.hpp).
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/gemm/sm90/epilogue.hpp>
#include <mxkit/gpu/gemm/sm90/mainloop.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

// G: 32-blocks per promotion, the k32 wgmmas that accumulate in the tensor core before an fp32
// add (1 keeps every block's product exact, as the reference; 4 is DeepGEMM's 128-K promotion).
// MnA, MnB: that bf16 operand is MN-major (tma_load_stage). WideD: bf16 D with 16-byte aligned
// rows, written through store_quad_rows (wide_output).
template <mma_kind TA, mma_kind TB, scaling S, int G, class Cfg, bool MnA = false, bool MnB = false, bool WideD = false>
MXKIT_GLOBAL void __launch_bounds__(threads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, const params p) {
#if MXKIT_SM90A
  static_assert(G == 1 || G == blocks_per_stage, "a promotion covers one block or one stage");
  static_assert(!(WideD && S == scaling::block), "block scaling keeps the pair stores");
  static_assert(TA == mma_kind::bf16 || !(MnA || MnB), "only 16-bit operands can be MN-major");
  static_assert(S != scaling::block || G == 1, "block scales change every 32 K");
  constexpr bool block_scaled = S == scaling::block;
  if (p.gate.closed()) return;  // uniform: every thread reads the same flag
  constexpr int BM = Cfg::bm, BN = Cfg::bn, SN = Cfg::sn;
  constexpr int a_stage_bytes = BM * tile_k, b_stage_bytes = BN * tile_k;
  // 1024-byte alignment (128B-swizzle atoms) by an offset from smem_raw, so the compiler still sees
  // shared-memory accesses (LDS, not generic loads) through `sm`.
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  smem_layout<BM, BN>& sm =
      *reinterpret_cast<smem_layout<BM, BN>*>(smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u));
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128;

  // Persistent: CTA x takes tiles x, x + gridDim.x, ..., so the CTAs in flight work on about one
  // grid's worth of neighbouring tiles at a time, and the stage pipeline runs on from one tile to
  // the next: the producer loads a tile's first stages while the consumers still store the
  // previous tile's outputs (with one CTA per SM, a fresh CTA per tile would wait for both).
  // Grouped raster: `group` row tiles share each column sweep, so the tiles in flight read about
  // as many A rows as B rows and both stay in L2.
  constexpr std::uint32_t group = 4096 / BM;
  const std::uint32_t tiles = p.tiles_p * p.tiles_q, per_group = group * p.tiles_q;
  std::uint32_t p0 = 0, q0 = 0;  // the current tile's first output row and column
  auto enter_tile = [&](std::uint32_t tile) {
    const std::uint32_t first = tile / per_group * group, rows_here = min(p.tiles_p - first, group);
    p0 = (first + (tile % per_group) % rows_here) * BM;
    q0 = (tile % per_group) / rows_here * BN;
  };
  // This CTA's share of the reduction: stages [k_first, k_first + k_stages).
  const std::uint32_t all_stages = (p.k_blocks + blocks_per_stage - 1) / blocks_per_stage;
  const std::uint32_t k_first = gridDim.y > 1 ? blockIdx.y * p.stages_per_split : 0u;
  const std::uint32_t k_stages = gridDim.y > 1 ? min(p.stages_per_split, all_stages - k_first) : all_stages;
  // Dynamic order (p.tile_counter): CTA x still starts with tile x, and then takes the next tile
  // nobody has taken (gridDim.x + a global counter), so a CTA that starts late, its SM held by
  // another stream's kernel (a collective's, which keeps its SMs for the whole transfer), takes
  // fewer tiles instead of finishing its static share late and the GEMM with it. Each tile's
  // arithmetic is the same in either order, so the results are too. The producer fetches; its
  // first stage of each tile carries the tile in sm.tile_of, and a last, empty stage carries a
  // tile past the end, which ends the consumers.
  const bool dynamic = p.tile_counter != nullptr && gridDim.y == 1 && k_stages > 0;

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&sm.full[s], 1 + 128);  // the TMA's expect_tx arrival + every producer thread (scales)
      mbar_init(&sm.empty[s], 256);     // every consumer thread
    }
    fence_mbar_init();
  }
  if (tid == 256) {
    prefetch_tensor_map(&map_a);
    prefetch_tensor_map(&map_b);
  }
  __syncthreads();

  if (wg == 2) {
    // ---- producer: TMA for A and B, scales to floats (producer thread pt converts rows pt and
    // pt + 128 of each side that has them) ----
    reg_dealloc<producer_regs>();
    const std::uint32_t pt = static_cast<std::uint32_t>(tid - 256);
    constexpr bool a2 = BM > 128;
    const bool b1 = pt < static_cast<std::uint32_t>(BN), b2 = pt + 128 < static_cast<std::uint32_t>(BN);
    // Scale bytes run one stage ahead in registers, so their global-load latency hides behind a
    // whole stage instead of stalling the stage that needs them.
    const bool words = p.scale_ld_a % 4 == 0 && p.scale_ld_b % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.scale_a) % 4 == 0 &&
                       reinterpret_cast<std::uintptr_t>(p.scale_b) % 4 == 0;
    auto fetch = [&](std::uint32_t it, std::uint32_t (&w)[4]) {
      const std::uint32_t kb = (k_first + it) * 4;
      w[0] = load_scales4(p.scale_a, p.scale_ld_a, p0 + pt, p.p, kb, p.k_blocks, words);
      w[1] = a2 ? load_scales4(p.scale_a, p.scale_ld_a, p0 + 128 + pt, p.p, kb, p.k_blocks, words) : 0u;
      w[2] = load_scales4(p.scale_b, p.scale_ld_b, q0 + pt, p.q, kb, p.k_blocks, words);
      w[3] = b2 ? load_scales4(p.scale_b, p.scale_ld_b, q0 + 128 + pt, p.q, kb, p.k_blocks, words) : 0u;
    };
    const int c0 = column_slot(static_cast<int>(pt)), c1 = column_slot(static_cast<int>(pt) + 128);
    std::uint32_t filled = 0;  // stages filled so far, over all of this CTA's tiles
    std::uint32_t fetches = 0;
    // The next tile after `tile`: producer thread 0 takes one from the counter and hands it to the
    // other producer threads through sm.fetched (two slots: a thread may still read the previous
    // one while thread 0, past this barrier, writes the next).
    auto next_tile = [&](std::uint32_t tile) {
      if (!dynamic) return tile + gridDim.x;
      std::uint32_t* slot = &sm.fetched[fetches++ & 1];
      if (pt == 0) *slot = gridDim.x + atomicAdd(p.tile_counter, 1u);
      named_barrier_sync(1, 128);
      return *slot;
    };
    for (std::uint32_t tile = blockIdx.x;; tile = next_tile(tile), filled += k_stages) {
      if (tile >= tiles) {
        if (dynamic) {  // the consumers' end: an empty stage whose tile is past the end
          const int s = static_cast<int>(filled % stages);
          mbar_wait(&sm.empty[s], ((filled / stages) & 1) ^ 1);
          if (pt == 0) {
            sm.tile_of[s] = tile;
            mbar_arrive(&sm.full[s]);  // in place of the TMA's arrival
          }
          mbar_arrive(&sm.full[s]);
        }
        break;
      }
      enter_tile(tile);
      std::uint32_t next[4] = {};
      if (block_scaled && k_stages > 0) fetch(0, next);
      for (std::uint32_t it = 0; it < k_stages; ++it) {
        const int s = static_cast<int>((filled + it) % stages);
        const std::uint32_t phase = ((filled + it) / stages) & 1;
        const std::uint32_t cur[4] = {next[0], next[1], next[2], next[3]};
        if (block_scaled && it + 1 < k_stages) fetch(it + 1, next);
        mbar_wait(&sm.empty[s], phase ^ 1);
        if (pt == 0) {
          if (dynamic && it == 0) sm.tile_of[s] = tile;
          mbar_arrive_expect_tx(&sm.full[s], a_stage_bytes + b_stage_bytes);
          const std::uint32_t k0 = (k_first + it) * tile_k;
          tma_load_stage<MnA, BM>(sm.a[s], &map_a, &sm.full[s], k0, p0);
          tma_load_stage<MnB, BN>(sm.b[s], &map_b, &sm.full[s], k0, q0);
        }
        if constexpr (block_scaled) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            sm.sa[s][j][pt] = e8m0::from_bits(static_cast<std::uint8_t>(cur[0] >> (8 * j))).to_float();
            if (a2) sm.sa[s][j][pt + 128] = e8m0::from_bits(static_cast<std::uint8_t>(cur[1] >> (8 * j))).to_float();
            if (b1) sm.sb[s][j][c0] = e8m0::from_bits(static_cast<std::uint8_t>(cur[2] >> (8 * j))).to_float();
            if (b2) sm.sb[s][j][c1] = e8m0::from_bits(static_cast<std::uint8_t>(cur[3] >> (8 * j))).to_float();
          }
        }
        mbar_arrive(&sm.full[s]);  // release: the scale stores above are visible to the waiters
      }
    }
    // The counter back to zero for the next launch: the last CTA out zeroes it, when every CTA's
    // fetches (each before its own count here) are done.
    if (dynamic && pt == 0) {
      __threadfence();
      if (atomicAdd(p.tile_counter + 1, 1u) == gridDim.x - 1) {
        p.tile_counter[0] = 0;
        p.tile_counter[1] = 0;
      }
    }
  } else {
    // ---- consumers: warpgroup wg owns rows [BM/2 wg, BM/2 (wg+1)) x all BN columns ----
    reg_alloc<consumer_regs>();
    constexpr int mh = Cfg::mh, subs = Cfg::subs, frag = Cfg::frag, ring = Cfg::ring, lag = Cfg::lag;
    const int lane = tid % 32, warp = (tid / 32) % 4, t = lane % 4;
    const int row0 = wg * (BM / 2) + warp * 16 + lane / 4;  // this thread's first row in half 0 (others: +8, +64, +72)
    std::uint32_t consumed = 0;  // stages consumed so far, over all of this CTA's tiles
    for (std::uint32_t tile = blockIdx.x;; consumed += k_stages) {
      if (dynamic) {  // the tile the producer put in this tile's first stage (the wait below then passes at once)
        const int s = static_cast<int>(consumed % stages);
        mbar_wait(&sm.full[s], (consumed / stages) & 1);
        tile = sm.tile_of[s];
      }
      if (tile >= tiles) break;
      enter_tile(tile);
      float acc[mh][subs][frag];
#pragma unroll
      for (int h = 0; h < mh; ++h)
#pragma unroll
        for (int u = 0; u < subs; ++u)
#pragma unroll
          for (int i = 0; i < frag; ++i) acc[h][u][i] = 0.0f;
      float P[ring][frag];

      // A warpgroup's BM/2 = 64 rows of an MN-major A are one panel, at the same offset.
      const std::uint32_t a_base = smem_addr(sm.a[0]) + static_cast<std::uint32_t>(wg) * (BM / 2) * tile_k, b_base = smem_addr(sm.b[0]);
      const std::uint32_t desc_a0 = MnA ? desc_sw128_mn_lo(a_base, mn_panel_bytes) : desc_sw128_lo(a_base);
      const std::uint32_t desc_b0 = MnB ? desc_sw128_mn_lo(b_base, mn_panel_bytes) : desc_sw128_lo(b_base);
      // Descriptor advances are in 16-byte units: stage, 64-row half, SN-row sub-tile, 32-byte K block.
      constexpr std::uint32_t a_stage = a_stage_bytes / 16, b_stage = b_stage_bytes / 16, half_rows = 64 * tile_k / 16,
                              sub_rows = SN * tile_k / 16, kblk = 32 / 16;

      // One stage (128 K) per iteration, as straight-line code: `steps` wgmma groups (G = 1: each
      // block x column sub-tile x row half; G = 4: each sub-tile x half, 4 k32 MMAs per group),
      // each issued `lag` groups before it is promoted. The ring drains at the end of each stage
      // (no wgmma result may be live across the loop's back edge, or ptxas serializes every wgmma:
      // warnings C7514/C7515); the other consumer warpgroup keeps the tensor cores busy meanwhile.
      constexpr int per_blk = subs * mh;
      constexpr int steps = G == 1 ? blocks_per_stage * per_blk : per_blk;
      static_assert(steps > lag, "the ring is shorter than a stage");
      // bf16: no promotion at all. Each stage is four m64n256k16 wgmmas straight into the
      // accumulators, drained before the stage is released; the other warpgroup's wgmmas fill the
      // tensor cores while this one waits. A k16 step is 32 bytes along a K-major row or 16 rows
      // (2048 bytes) down an MN-major panel.
      constexpr bool direct = TA == mma_kind::bf16;
      constexpr std::uint32_t k16_a = MnA ? 16 * tile_k / 16 : kblk, k16_b = MnB ? 16 * tile_k / 16 : kblk;
      static_assert(!direct || (mh == 1 && BN == 256 && SN == 64 && S == scaling::tensor), "bf16 uses the 64x256 warpgroup tile");
      for (std::uint32_t it = 0; direct && it < k_stages; ++it) {
        const int s = static_cast<int>((consumed + it) % stages);
        mbar_wait(&sm.full[s], ((consumed + it) / stages) & 1);
        const std::uint32_t da = desc_a0 + static_cast<std::uint32_t>(s) * a_stage, db = desc_b0 + static_cast<std::uint32_t>(s) * b_stage;
#pragma unroll
        for (int u = 0; u < subs; ++u)
#pragma unroll
          for (int i = 0; i < frag; ++i) fence_operand(acc[0][u][i]);
        wgmma_fence();
#pragma unroll
        for (int g = 0; g < blocks_per_stage; ++g)
          wgmma_m64n256k16_bf16<MnA, MnB>(acc[0], da + static_cast<std::uint32_t>(g) * k16_a, db + static_cast<std::uint32_t>(g) * k16_b);
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int u = 0; u < subs; ++u)
#pragma unroll
          for (int i = 0; i < frag; ++i) fence_operand(acc[0][u][i]);
        mbar_arrive(&sm.empty[s]);
      }
      for (std::uint32_t it = 0; !direct && it < k_stages; ++it) {
        const int s = static_cast<int>((consumed + it) % stages);
        mbar_wait(&sm.full[s], ((consumed + it) / stages) & 1);
        const float* sa_s = &sm.sa[s][0][0];
        const float* sb_s = &sm.sb[s][0][0];
        const std::uint32_t da = desc_a0 + static_cast<std::uint32_t>(s) * a_stage, db = desc_b0 + static_cast<std::uint32_t>(s) * b_stage;
        // Scales for promoting step n: its sub-tile's column scales are read at half 0 and kept for
        // the other half; the row scales are this thread's two rows of half h.
        float4 cs[SN / 16] = {};
        auto scales_of = [&](int n) {
          const int blk = G == 1 ? n / per_blk : 0, u = (n / mh) % subs, h = n % mh;
          sub_scales<SN> sc;
          if (h == 0) {
            const float4* sb = reinterpret_cast<const float4*>(sb_s + blk * BN + u * SN);
#pragma unroll
            for (int j = 0; j < SN / 16; ++j) cs[j] = sb[j * 4 + t];
          }
#pragma unroll
          for (int j = 0; j < SN / 16; ++j) sc.b[j] = cs[j];
          sc.a0 = sa_s[blk * BM + row0 + h * 64];
          sc.a1 = sa_s[blk * BM + row0 + h * 64 + 8];
          return sc;
        };
        // Scales are read between a wgmma commit and the following wait (both asm statements with
        // memory clobbers pin the loads there): read right before the wgmma.fence, the fence
        // stalls until they land. With Cfg::prefetch they are read one promotion ahead (`next`),
        // so their latency hides behind a whole promotion instead of stalling the first multiply.
        sub_scales<SN> cur{}, next{};
        if (block_scaled && Cfg::prefetch) cur = scales_of(0);
#pragma unroll
        for (int st = 0; st < steps; ++st) {
          const int blk = G == 1 ? st / per_blk : 0, u = (st / mh) % subs, h = st % mh;
          float(&Pn)[frag] = P[st % ring];
#pragma unroll
          for (int i = 0; i < frag; ++i) fence_operand(Pn[i]);
          wgmma_fence();
#pragma unroll
          for (int g = 0; g < G; ++g)
            wgmma_step<SN, TA, TB>(Pn, da + static_cast<std::uint32_t>(h) * half_rows + static_cast<std::uint32_t>(blk + g) * kblk,
                                  db + static_cast<std::uint32_t>(u) * sub_rows + static_cast<std::uint32_t>(blk + g) * kblk,
                                  g > 0 ? 1u : 0u);
          wgmma_commit();
          if (st >= lag) {  // promote step n = st - lag while this step's wgmma runs
            const int n = st - lag;
            if (block_scaled && Cfg::prefetch && n + 1 < steps) next = scales_of(n + 1);
            if (block_scaled && !Cfg::prefetch) cur = scales_of(n);
            wgmma_wait<lag>();
            promote<block_scaled, SN>(P[n % ring], acc[n % mh][(n / mh) % subs], cur);
            if (Cfg::prefetch) cur = next;
          }
        }
#pragma unroll
        for (int d = 0; d < lag; ++d) {  // drain the ring
          const int n = steps - lag + d;
          if (block_scaled && Cfg::prefetch && n + 1 < steps) next = scales_of(n + 1);
          if (block_scaled && !Cfg::prefetch) cur = scales_of(n);
          wgmma_wait_n(lag - 1 - d);
          promote<block_scaled, SN>(P[n % ring], acc[n % mh][(n / mh) % subs], cur);
          if (Cfg::prefetch) cur = next;
        }
        mbar_arrive(&sm.empty[s]);  // this thread is done with stage s (MMAs complete, scales read)
      }
      // ---- epilogue: fragment (rows +0/+8 of each half, column 8i + 2t + {0,1}) of each sub-tile ----
      // Line factors of rows and columns past the edge are never used (store_pair skips them).
      // WideD: 32 columns (four groups) at a time through store_quad_rows where the warp's 16
      // rows and the 32 columns are all inside D (warp-uniform, as its shuffles need), pairs at
      // the edges; otherwise the pair loop.
      auto line_factor = [](const float* f, std::uint32_t i, std::uint32_t n) { return i < n ? f[i] : 1.0f; };
      const float post_scale = p.tensor_scale_a   ? (1.0f / *p.tensor_scale_a) * (1.0f / *p.tensor_scale_b)
                               : p.decode_scale_a ? *p.decode_scale_a * *p.decode_scale_b
                                                  : p.post_scale;
#pragma unroll
      for (int h = 0; h < mh; ++h) {
        const std::uint32_t row = p0 + static_cast<std::uint32_t>(row0 + h * 64);
        float fr0 = post_scale, fr1 = post_scale;
        if constexpr (S == scaling::line) {
          fr0 = line_factor(p.line_scale_a, row, p.p);
          fr1 = line_factor(p.line_scale_a, row + 8, p.p);
        }
        if constexpr (WideD) {
          const bool warp_rows_in = p0 + static_cast<std::uint32_t>(wg * (BM / 2) + h * 64 + warp * 16 + 16) <= p.p;
#pragma unroll
          for (int u = 0; u < subs; ++u)
#pragma unroll
            for (int i0 = 0; i0 < SN / 8; i0 += 4) {
              const std::uint32_t col0 = q0 + static_cast<std::uint32_t>(u * SN + i0 * 8);
              float fc[8];
#pragma unroll
              for (int k = 0; k < 8; ++k) fc[k] = 1.0f;
              if constexpr (S == scaling::line) {
#pragma unroll
                for (int k = 0; k < 8; ++k) fc[k] = line_factor(p.line_scale_b, col0 + static_cast<std::uint32_t>(k / 2 * 8 + 2 * t + k % 2), p.q);
              }
              if (warp_rows_in && col0 + 32 <= p.q) {
                store_quad_rows(p, row, col0, &acc[h][u][i0 * 4], fr0, fr1, fc);
                continue;
              }
#pragma unroll
              for (int k = 0; k < 4; ++k) {
                const int i = i0 + k;
                const std::uint32_t col = col0 + static_cast<std::uint32_t>(k * 8 + 2 * t);
                store_pair(p, row, col, acc[h][u][i * 4 + 0], acc[h][u][i * 4 + 1], fr0, fc[2 * k], fc[2 * k + 1]);
                store_pair(p, row + 8, col, acc[h][u][i * 4 + 2], acc[h][u][i * 4 + 3], fr1, fc[2 * k], fc[2 * k + 1]);
              }
            }
        } else {
#pragma unroll
          for (int u = 0; u < subs; ++u)
#pragma unroll
            for (int i = 0; i < SN / 8; ++i) {
              const std::uint32_t col = q0 + static_cast<std::uint32_t>(u * SN + i * 8 + 2 * t);
              float fc0 = 1.0f, fc1 = 1.0f;
              if constexpr (S == scaling::line) {
                fc0 = line_factor(p.line_scale_b, col, p.q);
                fc1 = line_factor(p.line_scale_b, col + 1, p.q);
              }
              store_pair(p, row, col, acc[h][u][i * 4 + 0], acc[h][u][i * 4 + 1], fr0, fc0, fc1);
              store_pair(p, row + 8, col, acc[h][u][i * 4 + 2], acc[h][u][i * 4 + 3], fr1, fc0, fc1);
            }
        }
      }
      if (!dynamic) tile += gridDim.x;
    }
  }
#else
  (void)map_a;
  (void)map_b;
  (void)p;
#endif
}

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
