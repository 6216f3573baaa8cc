// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sharded checkpoints of a data-parallel run (data_parallel.hpp): a directory holding one shard
// file per rank and a manifest, written last. Every file goes through detail::replace_file
// (io/file_io.hpp: a temporary, fsync, rename, directory fsync), as checkpoint.hpp's single file
// does, and uses its little-endian primitives and FNV-1a 64 checksum.
//
//   shard-<r>-of-<N>   written by rank r: its part of every trainable parameter's weight and AdamW
//                      moments (ZeRO-1: exactly the shard it owns; unsharded: elements
//                      [r s / N, (r + 1) s / N) of each parameter of s elements), and, on rank 0,
//                      every frozen weight with a master copy whole.
//     offset 0   char[8]  magic "MXKITSHD"
//            8   u32      format version (1)
//           12   u32      rank, u32 ranks
//           20   u64      training steps completed, u64 optimizer steps
//           36   u32      record count R, u64 payload bytes P
//           48   R records: u32 kind (0 weight, 1 AdamW m, 2 AdamW v), u32 element type (0 f32,
//                1 f64), u32 name length n, n bytes of name, u64 first element (row-major, within
//                the parameter), u64 count, count elements
//       48 + P   u64      FNV-1a 64 of bytes [0, 48 + P)
//   manifest           written by rank 0 after every rank has written its shard (a collective
//                      says so): magic "MXKITMAN", u32 version 1, u32 ranks N, u64 steps, u64
//                      optimizer steps, N x u64 the shards' checksums, then the FNV-1a 64 of all
//                      that. No manifest, or one that names other shards, is no checkpoint: a crash
//                      mid-save leaves the previous manifest and shards of the previous save, or a
//                      manifest whose checksums the new shards do not match (refused, naming the
//                      shard).
// Loading reads the manifest and every shard (on every rank), checks each checksum, assembles every
// parameter's elements (each covered exactly once) and only then writes the weights and this
// rank's moments. The saved N may differ from the loading run's: the shards are resharded by
// element ranges, so a run saved on 4 ranks resumes on 2 or 3 (or 1: the unsharded trainer).
// Every failure is a checkpoint_error naming the file. As in checkpoint.hpp's version 1, FP8 amax
// histories are not saved: they refill within history_length steps.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <mxkit/io/checkpoint.hpp>
#include <mxkit/parallel/data_parallel.hpp>
#include <mxkit/train/training.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

inline constexpr char shard_magic[8] = {'M', 'X', 'K', 'I', 'T', 'S', 'H', 'D'};
inline constexpr char manifest_magic[8] = {'M', 'X', 'K', 'I', 'T', 'M', 'A', 'N'};
inline constexpr std::uint32_t sharded_checkpoint_version = 1;
inline constexpr std::size_t shard_header_bytes = 48;

inline std::filesystem::path shard_path(const std::filesystem::path& dir, int rank, int ranks) {
  return dir / ("shard-" + std::to_string(rank) + "-of-" + std::to_string(ranks));
}
inline std::filesystem::path manifest_path(const std::filesystem::path& dir) { return dir / "manifest"; }

namespace sharded_io {

// A whole small file (a shard or the manifest), as checkpoint_error on failure.
inline std::vector<std::uint8_t> read_all(const std::filesystem::path& path) {
  std::vector<std::uint8_t> b;
  try {
    detail::input_file in(path);
    if (in.is_directory()) throw checkpoint_error("checkpoint '" + path.string() + "': is a directory");
    if (in.regular_size()) b.reserve(static_cast<std::size_t>(*in.regular_size()));
    std::vector<std::uint8_t> chunk(std::size_t{1} << 20);
    for (std::size_t got = chunk.size(); got == chunk.size();) {
      got = in.read(chunk.data(), chunk.size());
      b.insert(b.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(got));
    }
  } catch (const std::system_error& e) {
    throw checkpoint_error("checkpoint '" + path.string() + "': " + e.what());
  }
  return b;
}

// Checks the trailing checksum of b; returns it.
inline std::uint64_t check_sum(const std::vector<std::uint8_t>& b, const std::string& file) {
  if (b.size() < 8) throw checkpoint_error("checkpoint '" + file + "': truncated (" + std::to_string(b.size()) + " bytes)");
  checkpoint_io::reader r(b, b.size() - 8, b.size(), file);
  const std::uint64_t want = r.get(8);
  if (want != checkpoint_io::fnv1a64(b.data(), b.size() - 8)) throw checkpoint_error("checkpoint '" + file + "': checksum mismatch: the file is corrupt");
  return want;
}

struct range {
  record_kind kind;
  const parameter* whole;
  tensor source;       // the elements to write (a whole tensor or a piece's view)
  std::size_t from;    // first element of source to write
  std::size_t begin;   // first element within the whole parameter
  std::size_t count;
};

// What this rank writes (see the top of the file).
inline std::vector<range> my_ranges(model& m, adamw& opt, data_parallel& dp) {
  std::vector<range> out;
  const std::size_t r = static_cast<std::size_t>(dp.rank()), n = static_cast<std::size_t>(dp.ranks());
  std::map<const parameter*, const adamw::slot*> slot_of;
  for (const adamw::slot& s : opt.slots()) slot_of[s.p] = &s;
  if (dp.sharded()) {
    for (const data_parallel::piece_ref& pr : dp.pieces()) {
      const std::size_t len = pr.piece->value.size();
      out.push_back({record_kind::weight, pr.whole, pr.piece->value, 0, pr.begin, len});
      const adamw::slot* s = slot_of.at(pr.piece);
      out.push_back({record_kind::adam_m, pr.whole, s->m, 0, pr.begin, len});
      out.push_back({record_kind::adam_v, pr.whole, s->v, 0, pr.begin, len});
    }
  } else {
    for (const adamw::slot& s : opt.slots()) {
      const std::size_t size = s.p->value.size(), lo = r * size / n, hi = (r + 1) * size / n;
      if (lo == hi) continue;
      out.push_back({record_kind::weight, s.p, s.p->value, lo, lo, hi - lo});
      out.push_back({record_kind::adam_m, s.p, s.m, lo, lo, hi - lo});
      out.push_back({record_kind::adam_v, s.p, s.v, lo, lo, hi - lo});
    }
  }
  if (r == 0)
    for (parameter* p : m.parameters())
      if (!p->trainable && p->value.defined()) out.push_back({record_kind::weight, p, p->value, 0, 0, p->value.size()});
  return out;
}

}  // namespace sharded_io

// Every rank calls this (a collective): each writes its shard, then rank 0 the manifest. Throws
// checkpoint_error on every rank if any rank's write failed (naming the rank's file and reason).
inline void save_sharded_checkpoint(const std::filesystem::path& dir, model& m, adamw& opt, data_parallel& dp, checkpoint_info info) {
  using checkpoint_io::put;
  backend& be = m.be();
  const int rank = dp.rank(), ranks = dp.ranks();
  info.optimizer_steps = opt.steps();
  std::vector<std::uint8_t> file(shard_magic, shard_magic + 8), payload;
  std::uint32_t count = 0;
  for (const sharded_io::range& g : sharded_io::my_ranges(m, opt, dp)) {
    const dtype t = g.source.type();
    put(payload, static_cast<std::uint32_t>(g.kind), 4);
    put(payload, t == dtype::f32 ? 0u : 1u, 4);
    put(payload, g.whole->name.size(), 4);
    payload.insert(payload.end(), g.whole->name.begin(), g.whole->name.end());
    put(payload, g.begin, 8);
    put(payload, g.count, 8);
    const std::vector<double> v = be.read(g.source);
    for (std::size_t i = g.from; i < g.from + g.count; ++i) {
      if (t == dtype::f32) put(payload, bit_cast<std::uint32_t>(static_cast<float>(v[i])), 4);
      else put(payload, bit_cast<std::uint64_t>(v[i]), 8);
    }
    ++count;
  }
  put(file, sharded_checkpoint_version, 4);
  put(file, static_cast<std::uint32_t>(rank), 4);
  put(file, static_cast<std::uint32_t>(ranks), 4);
  put(file, info.steps, 8);
  put(file, info.optimizer_steps, 8);
  put(file, count, 4);
  put(file, payload.size(), 8);
  file.insert(file.end(), payload.begin(), payload.end());
  const std::uint64_t sum = checkpoint_io::fnv1a64(file.data(), file.size());
  put(file, sum, 8);

  std::string error;
  try {
    if (rank == 0) std::filesystem::create_directories(dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // The collectives move backend tensors (device memory under NCCL), read back on the host.
  communicator* comm = dp.comm();
  auto any_failed = [&](bool failed) {  // a collective: did any rank fail?
    if (!comm) return failed;
    tensor f = be.alloc(1, 1, dtype::i32, mem_tag::activation);
    be.write(f, {failed ? 1.0 : 0.0});
    comm->all_reduce(f, reduce_op::sum);
    comm->join();
    return be.read(f)[0] != 0.0;
  };
  if (any_failed(!error.empty())) throw checkpoint_error("checkpoint '" + dir.string() + "': cannot create the directory" + (error.empty() ? " (on rank 0)" : ": " + error));
  const std::filesystem::path mine = shard_path(dir, rank, ranks);
  try {
    detail::replace_file(mine, file.data(), file.size());
  } catch (const std::system_error& e) {
    error = "checkpoint '" + mine.string() + "': " + e.what();
  }
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(ranks), sum);
  if (comm) {  // every shard's checksum, as two 32-bit halves in i32 (exact as doubles)
    tensor mine_sum = be.alloc(1, 2, dtype::i32, mem_tag::activation);
    tensor all = be.alloc(1, 2 * sums.size(), dtype::i32, mem_tag::activation);
    auto half = [](std::uint64_t v) { return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(v))); };
    be.write(mine_sum, {half(sum), half(sum >> 32)});
    comm->all_gather(buffer_of(mine_sum), buffer_of(all));
    comm->join();
    const std::vector<double> h = be.read(all);
    auto bits = [](double v) { return std::uint64_t{static_cast<std::uint32_t>(static_cast<std::int32_t>(v))}; };
    for (std::size_t k = 0; k < sums.size(); ++k) sums[k] = bits(h[2 * k]) | bits(h[2 * k + 1]) << 32;
  }
  if (any_failed(!error.empty())) throw checkpoint_error(error.empty() ? "checkpoint '" + dir.string() + "': another rank failed to write its shard" : error);
  if (rank == 0) {
    std::vector<std::uint8_t> man(manifest_magic, manifest_magic + 8);
    put(man, sharded_checkpoint_version, 4);
    put(man, static_cast<std::uint32_t>(ranks), 4);
    put(man, info.steps, 8);
    put(man, info.optimizer_steps, 8);
    for (std::uint64_t s : sums) put(man, s, 8);
    put(man, checkpoint_io::fnv1a64(man.data(), man.size()), 8);
    try {
      detail::replace_file(manifest_path(dir), man.data(), man.size());
    } catch (const std::system_error& e) {
      error = "checkpoint '" + manifest_path(dir).string() + "': " + e.what();
    }
  }
  if (any_failed(!error.empty())) throw checkpoint_error(error.empty() ? "checkpoint '" + dir.string() + "': rank 0 failed to write the manifest" : error);
}

// Every rank calls this; the saved run may have had another number of ranks (resharded). Leaves
// the model and optimizer untouched on failure.
inline checkpoint_info load_sharded_checkpoint(const std::filesystem::path& dir, model& m, adamw& opt, data_parallel& dp);
namespace sharded_io {
inline checkpoint_info load_gathered(const std::filesystem::path& dir, model& m, adamw& opt, data_parallel& dp);
}
// Full sharding: the weights are gathered for the load and this rank keeps its shard of them.
inline checkpoint_info load_sharded_checkpoint(const std::filesystem::path& dir, model& m, adamw& opt, data_parallel& dp) {
  dp.gather_all();
  checkpoint_info info;
  try {
    info = sharded_io::load_gathered(dir, m, opt, dp);
  } catch (...) {
    dp.release_all(false);
    throw;
  }
  dp.release_all(true);
  return info;
}
inline checkpoint_info sharded_io::load_gathered(const std::filesystem::path& dir, model& m, adamw& opt, data_parallel& dp) {
  const std::string mf = manifest_path(dir).string();
  const std::vector<std::uint8_t> man = sharded_io::read_all(manifest_path(dir));
  if (man.size() < 40 || std::memcmp(man.data(), manifest_magic, 8) != 0) throw checkpoint_error("checkpoint '" + mf + "': not an mxkit manifest");
  sharded_io::check_sum(man, mf);
  checkpoint_io::reader h(man, 8, man.size() - 8, mf);
  if (h.get(4) != sharded_checkpoint_version) throw checkpoint_error("checkpoint '" + mf + "': unsupported format version");
  const std::size_t saved_ranks = static_cast<std::size_t>(h.get(4));
  checkpoint_info info;
  info.steps = h.get(8);
  info.optimizer_steps = h.get(8);
  if (saved_ranks == 0 || (man.size() - 40) / 8 != saved_ranks || (man.size() - 40) % 8 != 0)
    throw checkpoint_error("checkpoint '" + mf + "': " + std::to_string(saved_ranks) + " ranks but " + std::to_string(man.size()) + " bytes");
  std::vector<std::uint64_t> sums(saved_ranks);
  for (std::uint64_t& s : sums) s = h.get(8);

  // name -> kind -> the whole parameter's elements, and how often each was written.
  struct assembled {
    std::vector<double> values;
    std::vector<std::uint8_t> covered;
  };
  std::map<std::string, parameter*> params;
  for (parameter* p : m.parameters())
    if (p->value.defined()) params[p->name] = p;
  std::map<std::pair<std::string, std::uint32_t>, assembled> parts;
  for (std::size_t r = 0; r < saved_ranks; ++r) {
    const std::filesystem::path path = shard_path(dir, static_cast<int>(r), static_cast<int>(saved_ranks));
    const std::string f = path.string();
    const std::vector<std::uint8_t> b = sharded_io::read_all(path);
    auto fail = [&](const std::string& why) { return checkpoint_error("checkpoint '" + f + "': " + why); };
    if (b.size() < shard_header_bytes + 8 || std::memcmp(b.data(), shard_magic, 8) != 0) throw fail("not an mxkit checkpoint shard");
    if (sharded_io::check_sum(b, f) != sums[r]) throw fail("does not belong to this manifest (its checksum differs from the manifest's)");
    checkpoint_io::reader s(b, 8, b.size() - 8, f);
    if (s.get(4) != sharded_checkpoint_version) throw fail("unsupported format version");
    if (s.get(4) != r || s.get(4) != saved_ranks) throw fail("is not shard " + std::to_string(r) + " of " + std::to_string(saved_ranks));
    if (s.get(8) != info.steps) throw fail("holds another step than the manifest");
    s.get(8);
    const std::uint32_t count = static_cast<std::uint32_t>(s.get(4));
    if (s.get(8) != b.size() - 8 - shard_header_bytes) throw fail("payload size differs from the header's");
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::uint32_t kind = static_cast<std::uint32_t>(s.get(4)), type = static_cast<std::uint32_t>(s.get(4));
      if (kind > 2 || type > 1) throw fail("record " + std::to_string(i) + " has an unknown kind or element type");
      const std::string name = s.bytes_as_string(static_cast<std::size_t>(s.get(4)));
      const std::uint64_t begin = s.get(8), n = s.get(8);
      auto it = params.find(name);
      if (it == params.end()) throw fail("'" + name + "' is not a parameter of this model");
      const tensor& like = it->second->value;
      if ((type == 0) != (like.type() == dtype::f32)) throw fail("'" + name + "' has another element type than the model's");
      if (begin > like.size() || n > like.size() - begin)
        throw fail("'" + name + "' elements [" + std::to_string(begin) + ", " + std::to_string(begin + n) + ") of a " +
                   std::to_string(like.size()) + "-element parameter");
      assembled& a = parts[{name, kind}];
      if (a.values.empty()) {
        a.values.assign(like.size(), 0.0);
        a.covered.assign(like.size(), 0);
      }
      const std::size_t w = type == 0 ? 4 : 8;
      for (std::size_t k = 0; k < n; ++k) {
        const std::uint64_t bits = s.get(static_cast<int>(w));
        a.values[begin + k] = w == 4 ? static_cast<double>(bit_cast<float>(static_cast<std::uint32_t>(bits))) : bit_cast<double>(bits);
        if (a.covered[begin + k]++) throw fail("'" + name + "' element " + std::to_string(begin + k) + " appears twice");
      }
    }
    if (!s.done()) throw fail("bytes after the last record");
  }
  auto whole = [&](const parameter* p, record_kind k) -> const std::vector<double>& {
    auto it = parts.find({p->name, static_cast<std::uint32_t>(k)});
    bool complete = it != parts.end();
    if (complete)
      for (std::uint8_t c : it->second.covered) complete = complete && c == 1;
    if (!complete)
      throw checkpoint_error("checkpoint '" + dir.string() + "': the " + std::to_string(saved_ranks) + " shards do not cover every element of '" +
                             p->name + "' (" + (k == record_kind::weight ? "weight" : "AdamW state") + ")");
    return it->second.values;
  };
  // Every check before any write.
  std::vector<std::pair<tensor, std::vector<double>>> writes;
  for (const auto& [name, p] : params) writes.emplace_back(p->value, whole(p, record_kind::weight));
  std::map<const parameter*, data_parallel::piece_ref> piece_of;
  for (const data_parallel::piece_ref& pr : dp.pieces()) piece_of[pr.piece] = pr;
  for (const adamw::slot& s : opt.slots()) {
    auto pr = piece_of.find(s.p);
    const parameter* w = pr == piece_of.end() ? s.p : pr->second.whole;
    const std::size_t begin = pr == piece_of.end() ? 0 : pr->second.begin, len = s.m.size();
    const std::vector<double>& mv = whole(w, record_kind::adam_m);
    const std::vector<double>& vv = whole(w, record_kind::adam_v);
    writes.emplace_back(s.m, std::vector<double>(mv.begin() + static_cast<std::ptrdiff_t>(begin), mv.begin() + static_cast<std::ptrdiff_t>(begin + len)));
    writes.emplace_back(s.v, std::vector<double>(vv.begin() + static_cast<std::ptrdiff_t>(begin), vv.begin() + static_cast<std::ptrdiff_t>(begin + len)));
  }
  backend& be = m.be();
  for (auto& [t, v] : writes) be.write(t, v);
  for (parameter* p : m.parameters()) ++p->version;
  opt.set_steps(info.optimizer_steps);
  return info;
}

// The trainer's forms: steps done saved; resumed at the saved step.
inline void save_sharded_checkpoint(const std::filesystem::path& dir, trainer& t) {
  checkpoint_info info;
  info.steps = t.steps_done();
  save_sharded_checkpoint(dir, t.trained_model(), t.optimizer(), t.parallel(), info);
}
inline checkpoint_info load_sharded_checkpoint(const std::filesystem::path& dir, trainer& t) {
  const checkpoint_info info = load_sharded_checkpoint(dir, t.trained_model(), t.optimizer(), t.parallel());
  t.seek(static_cast<std::size_t>(info.steps));
  return info;
}

}  // namespace nn
MXKIT_END_NAMESPACE
