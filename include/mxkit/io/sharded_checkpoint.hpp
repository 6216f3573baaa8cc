// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sharded checkpoints of a data-parallel run (data_parallel.hpp): a directory holding one shard
// file per rank and a manifest that names them. Every file goes through detail::replace_file
// (file_io.hpp: a temporary, fsync, rename, directory fsync), as checkpoint.hpp's single file
// does, and uses its little-endian primitives, FNV-1a 64 checksum and run settings.
//
//   shard-<r>-of-<N>-g<G>  written by rank r in the save of generation G: its part of every
//                      trainable parameter's weight and AdamW moments (ZeRO-1: exactly the shard
//                      it owns; unsharded: elements [r s / N, (r + 1) s / N) of each parameter of s
//                      elements), and, on rank 0, every frozen weight with a master copy whole.
//     offset 0   char[8]  magic "MXKITSHD"
//            8   u32      format version (1)
//           12   u32      rank, u32 ranks
//           20   u64      training steps completed, u64 optimizer steps
//           36   u32      record count R, u64 payload bytes P
//           48   R records: u32 kind (0 weight, 1 AdamW m, 2 AdamW v), u32 element type (0 f32,
//                1 f64), u32 name length n, n bytes of name, u64 first element (row-major, within
//                the parameter), u64 count, count elements
//       48 + P   u64      FNV-1a 64 of bytes [0, 48 + P)
//   manifest           written by rank 0 once every rank has written its shard: magic "MXKITMAN",
//                      u32 version 2, u32 ranks N, u64 steps, u64 optimizer steps, u64 generation
//                      G (>= 1), u64 settings bytes S (at most checkpoint_max_settings_bytes), S
//                      bytes of run settings (checkpoint.hpp's "key=value\n" lines: what the
//                      saver records of its run, for a resume to compare), N x u64 the shards'
//                      checksums, then the FNV-1a 64 of all that. Version 1 manifests (no
//                      generation or settings; shards named shard-<r>-of-<N>) still load.
// Write order (save_sharded_checkpoint), and what a failure leaves:
//   1. rank 0 creates the directory and reads the manifest there: the save's generation G is its
//      generation + 1 (1 without a readable one), broadcast to every rank.
//   2. every rank writes its shard under generation G's name: a new file, so no file that the
//      manifest in place names is touched.
//   3. a collective gathers every shard's checksum and whether any rank failed. A failure (a full
//      disk on one rank) ends the save on every rank with checkpoint_error naming that rank's file
//      and reason, once each rank has removed the shard it wrote (a last collective); the previous
//      manifest and its shards load as before.
//   4. rank 0 replaces the manifest (atomic rename, then the directory's fsync): before the rename
//      the previous checkpoint loads, after it the new one. A failure here removes no shard, so
//      whichever manifest is on disk finds its own.
//   5. a collective says whether the manifest was written; then rank 0 removes every other shard
//      file in the directory (the previous generation's, and those of a save that failed or
//      crashed). Best effort: a file left behind costs space, never a load; the next save removes it.
// A crash anywhere leaves the previous checkpoint or the new one loadable, never neither.
// Loading reads the manifest and every shard (on every rank), checks each checksum, assembles every
// parameter's elements (each covered exactly once) and only then writes the weights and this
// rank's moments. The saved N may differ from the loading run's: the shards are resharded by
// element ranges, so a run saved on 4 ranks resumes on 2 or 3 (or 1: the unsharded trainer).
// Every failure is a checkpoint_error naming the file. As in checkpoint.hpp, FP8 amax histories
// are not saved: they refill within history_length steps.
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
inline constexpr std::uint32_t sharded_checkpoint_version = 1;  // of a shard file
inline constexpr std::uint32_t manifest_version = 2;             // written; versions 1 and 2 are read
inline constexpr std::size_t shard_header_bytes = 48;

// Shard r of N in the save of generation G; generation 0 is a version 1 manifest's name.
inline std::filesystem::path shard_path(const std::filesystem::path& dir, int rank, int ranks, std::uint64_t generation) {
  std::string name = "shard-" + std::to_string(rank) + "-of-" + std::to_string(ranks);
  if (generation > 0) name += "-g" + std::to_string(generation);
  return dir / name;
}
inline std::filesystem::path manifest_path(const std::filesystem::path& dir) { return dir / "manifest"; }

// A manifest as read (read_sharded_manifest).
struct sharded_manifest {
  std::uint32_t version = manifest_version;
  std::uint32_t ranks = 0;
  std::uint64_t steps = 0, optimizer_steps = 0;
  std::uint64_t generation = 0;       // 0 in a version 1 manifest
  checkpoint_settings settings{};     // none in a version 1 manifest
  std::vector<std::uint64_t> checksums;  // one per shard
  std::filesystem::path shard(const std::filesystem::path& dir, std::size_t rank) const {
    return shard_path(dir, static_cast<int>(rank), static_cast<int>(ranks), generation);
  }
};

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

// A u64 through i32 collectives: two 32-bit halves, exact as doubles (backend::read).
inline double low_half(std::uint64_t v) { return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(v))); }
inline std::uint64_t half_bits(double v) { return std::uint64_t{static_cast<std::uint32_t>(static_cast<std::int32_t>(v))}; }

// Whether `name` is a shard file's (any rank, count or generation): what a save may remove.
inline bool is_shard_name(const std::string& name) {
  std::size_t pos = 0;
  auto literal = [&](const char* text) {
    const std::size_t n = std::strlen(text);
    if (name.compare(pos, n, text) != 0) return false;
    pos += n;
    return true;
  };
  auto digits = [&] {
    const std::size_t from = pos;
    while (pos < name.size() && name[pos] >= '0' && name[pos] <= '9') ++pos;
    return pos > from;
  };
  if (!literal("shard-") || !digits() || !literal("-of-") || !digits()) return false;
  if (pos == name.size()) return true;
  return literal("-g") && digits() && pos == name.size();
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

// The manifest in `dir`, checked (magic, checksum, version, sizes); its shards are not read.
// Throws checkpoint_error naming the file.
inline sharded_manifest read_sharded_manifest(const std::filesystem::path& dir) {
  const std::string mf = manifest_path(dir).string();
  const std::vector<std::uint8_t> man = sharded_io::read_all(manifest_path(dir));
  auto fail = [&](const std::string& why) { return checkpoint_error("checkpoint '" + mf + "': " + why); };
  if (man.size() < 16 || std::memcmp(man.data(), manifest_magic, 8) != 0) throw fail("not an mxkit manifest");
  sharded_io::check_sum(man, mf);
  checkpoint_io::reader h(man, 8, man.size() - 8, mf);
  sharded_manifest out;
  out.version = static_cast<std::uint32_t>(h.get(4));
  if (out.version != 1 && out.version != 2)
    throw fail("format version " + std::to_string(out.version) + " is not supported (this build reads versions 1 and 2)");
  out.ranks = static_cast<std::uint32_t>(h.get(4));
  out.steps = h.get(8);
  out.optimizer_steps = h.get(8);
  if (out.version >= 2) {
    out.generation = h.get(8);
    if (out.generation == 0) throw fail("generation 0 (a version 2 manifest counts its saves from 1)");
    const std::uint64_t settings_bytes = h.get(8);
    if (settings_bytes > checkpoint_max_settings_bytes)
      throw fail(std::to_string(settings_bytes) + " bytes of run settings, more than the " +
                 std::to_string(checkpoint_max_settings_bytes) + " a checkpoint holds");
    out.settings = checkpoint_io::decode_settings(mf, h.bytes_as_string(static_cast<std::size_t>(settings_bytes)));
  }
  const std::size_t left = man.size() - 8 - h.pos();
  if (out.ranks == 0 || left % 8 != 0 || left / 8 != out.ranks)
    throw fail(std::to_string(out.ranks) + " ranks but " + std::to_string(left) + " bytes of shard checksums");
  out.checksums.resize(out.ranks);
  for (std::uint64_t& c : out.checksums) c = h.get(8);
  return out;
}

// What a sharded checkpoint records of its run (steps, optimizer steps, settings, the manifest's
// format version: settings from version 2 on), from the manifest alone, as read_checkpoint_info
// reads a single file's header: to compare a run's settings before loading anything.
inline checkpoint_info read_sharded_checkpoint_info(const std::filesystem::path& dir) {
  sharded_manifest m = read_sharded_manifest(dir);
  checkpoint_info info;
  info.steps = m.steps;
  info.optimizer_steps = m.optimizer_steps;
  info.settings = std::move(m.settings);
  info.version = m.version;
  return info;
}

// Every rank calls this (a collective) with the same info.steps and info.settings: the write
// order at the top of the file. Throws checkpoint_error on every rank if any rank's write failed
// (naming the rank's file and reason); the previous checkpoint in `dir` then still loads.
inline void save_sharded_checkpoint(const std::filesystem::path& dir, model& m, adamw& opt, data_parallel& dp, checkpoint_info info) {
  using checkpoint_io::put;
  backend& be = m.be();
  const int rank = dp.rank(), ranks = dp.ranks();
  info.optimizer_steps = opt.steps();
  const std::string settings = checkpoint_io::encode_settings(info.settings);  // a bad setting: before any file or collective
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

  // 1. The directory, and the generation after the manifest's there.
  std::string error;
  std::uint64_t generation = 1;
  if (rank == 0) {
    try {
      std::filesystem::create_directories(dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::error_code ec;
    if (error.empty() && std::filesystem::exists(manifest_path(dir), ec)) {
      try {
        const std::uint64_t previous = read_sharded_manifest(dir).generation;
        generation = previous == ~std::uint64_t{0} ? 1 : previous + 1;
      } catch (const checkpoint_error&) {  // unreadable: nothing there loads, and generation 1 is as good as any
      }
    }
  }
  if (any_failed(!error.empty()))
    throw checkpoint_error("checkpoint '" + dir.string() + "': cannot create the directory" + (error.empty() ? " (on rank 0)" : ": " + error));
  if (comm) {
    tensor g = be.alloc(1, 2, dtype::i32, mem_tag::activation);
    be.write(g, {sharded_io::low_half(generation), sharded_io::low_half(generation >> 32)});
    comm->broadcast(buffer_of(g), 0);
    comm->join();
    const std::vector<double> h = be.read(g);
    generation = sharded_io::half_bits(h[0]) | sharded_io::half_bits(h[1]) << 32;
  }

  // 2. This rank's shard, under the new generation's name.
  const std::filesystem::path mine = shard_path(dir, rank, ranks, generation);
  bool written = false;
  try {
    detail::replace_file(mine, file.data(), file.size());
    written = true;
  } catch (const std::system_error& e) {
    error = "checkpoint '" + mine.string() + "': " + e.what();
  }

  // 3. Every shard's checksum; a failure anywhere removes the new shards and ends the save.
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(ranks), sum);
  if (comm) {
    tensor mine_sum = be.alloc(1, 2, dtype::i32, mem_tag::activation);
    tensor all = be.alloc(1, 2 * sums.size(), dtype::i32, mem_tag::activation);
    be.write(mine_sum, {sharded_io::low_half(sum), sharded_io::low_half(sum >> 32)});
    comm->all_gather(buffer_of(mine_sum), buffer_of(all));
    comm->join();
    const std::vector<double> h = be.read(all);
    for (std::size_t k = 0; k < sums.size(); ++k) sums[k] = sharded_io::half_bits(h[2 * k]) | sharded_io::half_bits(h[2 * k + 1]) << 32;
  }
  if (any_failed(!error.empty())) {
    std::error_code ec;
    if (written) std::filesystem::remove(mine, ec);  // best effort: the next save removes it otherwise
    (void)any_failed(false);  // every rank has removed its shard before any rank's caller sees the error
    throw checkpoint_error((error.empty() ? "checkpoint '" + dir.string() + "': another rank failed to write its shard" : error) +
                           "; the previous checkpoint there is kept");
  }

  // 4. The manifest, which switches the directory to the new generation.
  if (rank == 0) {
    std::vector<std::uint8_t> man(manifest_magic, manifest_magic + 8);
    put(man, manifest_version, 4);
    put(man, static_cast<std::uint32_t>(ranks), 4);
    put(man, info.steps, 8);
    put(man, info.optimizer_steps, 8);
    put(man, generation, 8);
    put(man, settings.size(), 8);
    man.insert(man.end(), settings.begin(), settings.end());
    for (std::uint64_t s : sums) put(man, s, 8);
    put(man, checkpoint_io::fnv1a64(man.data(), man.size()), 8);
    try {
      detail::replace_file(manifest_path(dir), man.data(), man.size());
    } catch (const std::system_error& e) {
      error = "checkpoint '" + manifest_path(dir).string() + "': " + e.what();
    }
  }
  if (any_failed(!error.empty()))
    throw checkpoint_error(error.empty() ? "checkpoint '" + dir.string() + "': rank 0 failed to write the manifest" : error);

  // 5. The new checkpoint is in place: every other shard file goes.
  if (rank == 0) {
    std::error_code ec;
    std::vector<std::filesystem::path> stale;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!sharded_io::is_shard_name(name)) continue;
      bool current = false;
      for (int r = 0; r < ranks; ++r) current = current || name == shard_path(dir, r, ranks, generation).filename().string();
      if (!current) stale.push_back(it->path());
    }
    for (const std::filesystem::path& p : stale) std::filesystem::remove(p, ec);
  }
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
  const sharded_manifest man = read_sharded_manifest(dir);
  const std::size_t saved_ranks = man.ranks;
  checkpoint_info info;
  info.steps = man.steps;
  info.optimizer_steps = man.optimizer_steps;
  info.settings = man.settings;
  info.version = man.version;
  const std::vector<std::uint64_t>& sums = man.checksums;

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
    const std::filesystem::path path = man.shard(dir, r);
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

// The trainer's forms: steps done (and the caller's run settings) saved; resumed at the saved step.
inline void save_sharded_checkpoint(const std::filesystem::path& dir, trainer& t, checkpoint_settings settings = {}) {
  checkpoint_info info;
  info.steps = t.steps_done();
  info.settings = std::move(settings);
  save_sharded_checkpoint(dir, t.trained_model(), t.optimizer(), t.parallel(), info);
}
inline checkpoint_info load_sharded_checkpoint(const std::filesystem::path& dir, trainer& t) {
  const checkpoint_info info = load_sharded_checkpoint(dir, t.trained_model(), t.optimizer(), t.parallel());
  t.seek(static_cast<std::size_t>(info.steps));
  return info;
}

}  // namespace nn
MXKIT_END_NAMESPACE
