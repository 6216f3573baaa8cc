// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checkpoints: model weights and AdamW state in one versioned, checksummed binary file, with the
// run settings of the program that saved it.
//
// Format version 2 (all integers little-endian, floats IEEE 754 little-endian):
//   offset 0   char[8]  magic "MXKITCKP"
//          8   u32      format version (2)
//         12   u32      record count R
//         16   u64      payload bytes P (the records)
//         24   u64      training steps completed
//         32   u64      optimizer steps taken (AdamW bias correction)
//         40   u64      settings bytes S (at most checkpoint_max_settings_bytes)
//         48   S bytes  the run settings: one "key=value\n" line each, in the saver's order (a key
//                       is not empty and holds no '=' or newline, a value no newline, no key twice)
//     48 + S   u64      FNV-1a 64 of bytes [0, 48 + S): the header's own checksum, so that the
//                       settings can be read and trusted without reading the payload
//     56 + S   R records, P bytes in all, each:
//                u32  kind: 0 weight, 1 AdamW first moment, 2 AdamW second moment
//                u32  element type: 0 f32, 1 f64
//                u32  name length n, then n bytes of name (the parameter's name)
//                u64  rows, u64 cols
//                rows * cols elements (4 or 8 bytes each)
// 56 + S + P   u64      FNV-1a 64 of bytes [0, 56 + S + P)
// Format version 1 (still loaded; saving writes version 2) has no settings: its records follow
// the 40-byte header directly and its one checksum covers [0, 40 + P). What the settings mean is
// the saver's business (the training program records its configuration there and compares it on
// --resume); this header only stores them. read_checkpoint_info reads the header and the settings
// alone, before a model exists to load into.
// Saving goes through detail::replace_file (file_io.hpp): a unique temporary next to <path>,
// created exclusively and never through a symlink, written, fsync'ed and closed with every result
// checked, renamed over <path>, then the directory fsync'ed. A crash leaves the old checkpoint or
// the new one, never a torn file; concurrent saves of one path each leave a complete checkpoint
// (the last rename wins); a failed save leaves the old checkpoint and no temporary, and throws
// checkpoint_error with the OS reason.
// Loading reads the header first (40 bytes, then for version 2 the settings and the header
// checksum) and checks, in order: magic (foreign file), size and version, the settings' size and
// the header checksum, the declared payload against the most this model can load (a weight and
// two AdamW moments per parameter) and against the file size (truncated); only then is the
// payload read, so a foreign, huge or endless file (/dev/zero) costs one header read. Then the
// checksum (corrupt), then that every record matches a parameter of the model by name, type and
// shape (optimizer records too, when they are not loaded) and that every parameter is present;
// only then is anything written. Every failure, an I/O error included, is a checkpoint_error
// naming the file.
// Weights without a master copy (quantized-only LoRA base, healing.hpp) are neither saved nor
// expected. FP8 amax histories are not saved: they refill within history_length steps.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <mxkit/config.hpp>
#include <mxkit/error.hpp>
#include <mxkit/train/adamw.hpp>
#include <mxkit/file_io.hpp>
#include <mxkit/nn/model.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class checkpoint_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr char checkpoint_magic[8] = {'M', 'X', 'K', 'I', 'T', 'C', 'K', 'P'};
inline constexpr std::uint32_t checkpoint_version = 2;      // written; versions 1 and 2 are read
inline constexpr std::size_t checkpoint_header_bytes = 40;   // the fixed part every version starts with
inline constexpr std::size_t checkpoint_max_settings_bytes = 65536;

enum class record_kind : std::uint32_t { weight = 0, adam_m = 1, adam_v = 2 };

// A run's settings as (key, value) pairs, in order (see the format above for what they may hold).
using checkpoint_settings = std::vector<std::pair<std::string, std::string>>;

struct checkpoint_info {
  std::uint64_t steps = 0;            // training steps completed
  std::uint64_t optimizer_steps = 0;  // AdamW steps (filled from the optimizer when saving)
  checkpoint_settings settings{};     // the saver's run settings (none in a version 1 file)
  std::uint32_t version = checkpoint_version;  // of the file read; saving always writes checkpoint_version
};

namespace checkpoint_io {

constexpr std::uint64_t fnv1a64(const std::uint8_t* p, std::size_t n, std::uint64_t h = 0xCBF29CE484222325ull) noexcept {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

inline void put(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

class reader {
 public:
  reader(const std::vector<std::uint8_t>& b, std::size_t pos, std::size_t end, std::string file)
      : b_(b), pos_(pos), end_(end), file_(std::move(file)) {}
  std::uint64_t get(int bytes) {
    need(static_cast<std::size_t>(bytes));
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{b_[pos_ + static_cast<std::size_t>(i)]} << (8 * i);
    pos_ += static_cast<std::size_t>(bytes);
    return v;
  }
  std::string bytes_as_string(std::size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::size_t pos() const noexcept { return pos_; }
  void skip(std::size_t n) {
    need(n);
    pos_ += n;
  }
  bool done() const noexcept { return pos_ == end_; }

 private:
  void need(std::size_t n) const {
    if (n > end_ - pos_) throw checkpoint_error("checkpoint '" + file_ + "': a record runs past the end of the payload");
  }
  const std::vector<std::uint8_t>& b_;
  std::size_t pos_, end_;
  std::string file_;
};

struct record {
  record_kind kind;
  dtype type;
  std::string name;
  std::uint64_t rows, cols;
  std::size_t offset;  // of the elements
};

// The largest payload a checkpoint that loads into `m` can have: one weight, one first-moment and
// one second-moment record per parameter with a master copy (load_checkpoint refuses a record
// that names no parameter, has another shape or repeats a (kind, name) pair).
inline std::uint64_t max_payload_bytes(model& m) {
  std::uint64_t per_kind = 0;
  for (parameter* p : m.parameters())
    if (p->value.defined()) per_kind += 4 + 4 + 4 + p->name.size() + 8 + 8 + p->value.size() * size_of(p->value.type());
  return 3 * per_kind;
}

// The settings block of the format: "key=value\n" lines. A bad key or value is the caller's
// mistake (std::invalid_argument), found before anything is written.
inline std::string encode_settings(const checkpoint_settings& settings) {
  std::string out;
  std::map<std::string_view, bool> seen;
  for (const auto& [key, value] : settings) {
    detail::require(!key.empty() && key.find_first_of("=\n") == std::string::npos, "save_checkpoint: setting key '", key,
                    "' must be non-empty and hold no '=' or newline");
    detail::require(value.find('\n') == std::string::npos, "save_checkpoint: the value of setting '", key, "' holds a newline");
    detail::require(seen.emplace(key, true).second, "save_checkpoint: setting '", key, "' appears twice");
    out.append(key).append("=").append(value).append("\n");
  }
  detail::require(out.size() <= checkpoint_max_settings_bytes, "save_checkpoint: the settings take ", out.size(),
                  " bytes, more than the ", checkpoint_max_settings_bytes, " a checkpoint holds");
  return out;
}

// The file being read: its name in every error, its size where it has one, checked reads.
class source {
 public:
  explicit source(const std::filesystem::path& path) : name_(path.string()) {
    try {
      in_.emplace(path);
    } catch (const std::system_error& e) {
      throw error(e.what());  // "cannot open the file: <OS reason>"
    }
    if (in_->is_directory()) throw error("is a directory, not a checkpoint file");
    size_ = in_->regular_size();  // none for devices and pipes
  }
  checkpoint_error error(const std::string& why) const { return checkpoint_error("checkpoint '" + name_ + "': " + why); }
  // Up to n bytes, fewer only at the end of the file.
  std::size_t read(std::uint8_t* dst, std::size_t n) {
    try {
      return in_->read(dst, n);
    } catch (const std::system_error& e) {
      throw error(e.what());
    }
  }
  const std::optional<std::uint64_t>& size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
  std::optional<detail::input_file> in_;
  std::optional<std::uint64_t> size_;
};

struct header {
  checkpoint_info info;
  std::uint32_t count = 0;     // records
  std::uint64_t payload = 0;   // their bytes
  std::vector<std::uint8_t> bytes;  // the file's bytes before the records (40, or 56 + S)
};

// The settings block read back; `file` names the file in a checkpoint_error (single files and
// sharded manifests store the same block).
inline checkpoint_settings decode_settings(const std::string& file, std::string_view text) {
  auto error = [&](const std::string& why) { return checkpoint_error("checkpoint '" + file + "': " + why); };
  checkpoint_settings out;
  std::map<std::string, bool> seen;
  if (!text.empty() && text.back() != '\n') throw error("the run settings do not end with a newline: the file is corrupt");
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = text.find('\n', pos);
    const std::string_view line = text.substr(pos, end - pos);
    const std::size_t eq = line.find('=');
    if (eq == 0 || eq == std::string_view::npos)
      throw error("run setting " + std::to_string(out.size()) + " is not key=value: the file is corrupt");
    std::string key(line.substr(0, eq));
    if (!seen.emplace(key, true).second) throw error("run setting '" + key + "' appears twice: the file is corrupt");
    out.emplace_back(std::move(key), std::string(line.substr(eq + 1)));
    pos = end + 1;
  }
  return out;
}

// Reads and checks everything before the records: magic, version, sizes, and for version 2 the
// settings and the header checksum. Nothing past the header is read.
inline header read_header(source& f) {
  header h;
  std::vector<std::uint8_t>& b = h.bytes;
  b.resize(checkpoint_header_bytes);
  const std::size_t got = f.read(b.data(), b.size());
  const std::optional<std::uint64_t>& file_size = f.size();
  if (got < 8 || std::memcmp(b.data(), checkpoint_magic, 8) != 0)
    throw f.error(got < 8 ? "truncated: " + std::to_string(got) + " bytes, not even a magic number" : "not an mxkit checkpoint (bad magic)");
  if (got < checkpoint_header_bytes || (file_size && *file_size < checkpoint_header_bytes + 8))
    throw f.error("truncated: " + std::to_string(file_size ? *file_size : got) + " bytes, smaller than the " +
                  std::to_string(checkpoint_header_bytes + 8) + "-byte header and checksum");
  reader r(b, 8, checkpoint_header_bytes, f.name());
  h.info.version = static_cast<std::uint32_t>(r.get(4));
  if (h.info.version != 1 && h.info.version != 2)
    throw f.error("format version " + std::to_string(h.info.version) + " is not supported (this build reads versions 1 and 2)");
  h.count = static_cast<std::uint32_t>(r.get(4));
  h.payload = r.get(8);
  h.info.steps = r.get(8);
  h.info.optimizer_steps = r.get(8);
  if (h.info.version == 1) return h;

  // Version 2: the settings' size, the settings and the header checksum.
  b.resize(checkpoint_header_bytes + 8);
  if (f.read(b.data() + checkpoint_header_bytes, 8) < 8) throw f.error("truncated: the file ends inside the version 2 header");
  const std::uint64_t settings_bytes = reader(b, checkpoint_header_bytes, b.size(), f.name()).get(8);
  if (settings_bytes > checkpoint_max_settings_bytes)
    throw f.error("the header declares " + std::to_string(settings_bytes) + " bytes of run settings, more than the " +
                  std::to_string(checkpoint_max_settings_bytes) + " a checkpoint holds");
  const std::size_t settings_end = b.size() + static_cast<std::size_t>(settings_bytes);
  if (file_size && *file_size < settings_end + 16)
    throw f.error("truncated: " + std::to_string(*file_size) + " bytes, smaller than the " + std::to_string(settings_end + 16) +
                  " bytes of the header, its settings and the two checksums");
  b.resize(settings_end + 8);
  const std::size_t rest = f.read(b.data() + checkpoint_header_bytes + 8, b.size() - checkpoint_header_bytes - 8);
  if (rest < b.size() - checkpoint_header_bytes - 8) throw f.error("truncated: the file ends inside the run settings");
  if (reader(b, settings_end, settings_end + 8, f.name()).get(8) != fnv1a64(b.data(), settings_end))
    throw f.error("header checksum mismatch: the file is corrupt");
  const auto* text = reinterpret_cast<const char*>(b.data() + checkpoint_header_bytes + 8);
  h.info.settings = decode_settings(f.name(), std::string_view(text, static_cast<std::size_t>(settings_bytes)));
  return h;
}

}  // namespace checkpoint_io

// Writes weights (every parameter with a master copy) and, if given, the optimizer state, with
// info.steps and info.settings (format version 2; info.optimizer_steps comes from `opt`).
inline void save_checkpoint(const std::filesystem::path& path, model& m, const adamw* opt, checkpoint_info info = {}) {
  using checkpoint_io::put;
  const std::string settings = checkpoint_io::encode_settings(info.settings);
  backend& be = m.be();
  std::vector<std::uint8_t> payload;
  std::uint32_t count = 0;
  auto add = [&](record_kind kind, const std::string& name, const tensor& t) {
    put(payload, static_cast<std::uint32_t>(kind), 4);
    put(payload, t.type() == dtype::f32 ? 0u : 1u, 4);
    put(payload, name.size(), 4);
    payload.insert(payload.end(), name.begin(), name.end());
    put(payload, t.rows(), 8);
    put(payload, t.cols(), 8);
    for (double v : be.read(t)) {
      if (t.type() == dtype::f32) put(payload, bit_cast<std::uint32_t>(static_cast<float>(v)), 4);
      else put(payload, bit_cast<std::uint64_t>(v), 8);
    }
    ++count;
  };
  for (parameter* p : m.parameters())
    if (p->value.defined()) add(record_kind::weight, p->name, p->value);
  if (opt) {
    info.optimizer_steps = opt->steps();
    for (const adamw::slot& s : opt->slots()) {
      add(record_kind::adam_m, s.p->name, s.m);
      add(record_kind::adam_v, s.p->name, s.v);
    }
  }
  std::vector<std::uint8_t> file(checkpoint_magic, checkpoint_magic + 8);
  put(file, checkpoint_version, 4);
  put(file, count, 4);
  put(file, payload.size(), 8);
  put(file, info.steps, 8);
  put(file, info.optimizer_steps, 8);
  put(file, settings.size(), 8);
  file.insert(file.end(), settings.begin(), settings.end());
  put(file, checkpoint_io::fnv1a64(file.data(), file.size()), 8);
  file.insert(file.end(), payload.begin(), payload.end());
  put(file, checkpoint_io::fnv1a64(file.data(), file.size()), 8);

  try {
    detail::replace_file(path, file.data(), file.size());
  } catch (const std::system_error& e) {
    throw checkpoint_error("checkpoint '" + path.string() + "': " + e.what());
  }
}

// The header of a checkpoint file: steps, optimizer steps, format version and run settings,
// checked as load_checkpoint checks them, without reading the payload or needing a model (to
// compare a run's settings before loading). Throws checkpoint_error naming the file.
inline checkpoint_info read_checkpoint_info(const std::filesystem::path& path) {
  checkpoint_io::source f(path);
  return checkpoint_io::read_header(f).info;
}

// Loads a checkpoint into `m` (and `opt`, whose moments must all be present). Throws
// checkpoint_error, naming the file and the problem, and leaves m and opt untouched on failure.
inline checkpoint_info load_checkpoint(const std::filesystem::path& path, model& m, adamw* opt) {
  checkpoint_io::source in(path);
  const std::string& f = in.name();
  auto fail = [&](const std::string& why) { return in.error(why); };
  auto read = [&](std::uint8_t* dst, std::size_t n) { return in.read(dst, n); };
  const std::optional<std::uint64_t>& file_size = in.size();
  checkpoint_io::header h = checkpoint_io::read_header(in);
  const checkpoint_info& info = h.info;
  const std::uint32_t count = h.count;
  const std::uint64_t payload = h.payload;
  const std::size_t prefix = h.bytes.size();  // the bytes before the records
  const std::uint64_t max_payload = checkpoint_io::max_payload_bytes(m);
  if (payload > max_payload)
    throw fail("the header declares a payload of " + std::to_string(payload) + " bytes, more than the " + std::to_string(max_payload) +
               " bytes a checkpoint of this model can hold (a weight and two AdamW moments per parameter)");
  const std::uint64_t expected = prefix + payload + 8;  // no wrap: payload <= max_payload
  if (file_size && *file_size < expected)
    throw fail("truncated: the header promises " + std::to_string(expected) + " bytes, the file has " + std::to_string(*file_size));
  if (file_size && *file_size > expected) throw fail(std::to_string(*file_size - expected) + " unexpected bytes after the checksum");

  // Exactly the bytes the header promises, then one more read to make sure the file ends there
  // (a device or pipe has no size to check first).
  std::vector<std::uint8_t> b = std::move(h.bytes);
  b.resize(static_cast<std::size_t>(expected));
  const std::size_t body = read(b.data() + prefix, b.size() - prefix);
  if (body < b.size() - prefix)
    throw fail("truncated: the header promises " + std::to_string(expected) + " bytes, the file has " + std::to_string(prefix + body));
  std::uint8_t extra = 0;
  if (read(&extra, 1) != 0) throw fail("unexpected bytes after the checksum");
  const std::size_t end = prefix + static_cast<std::size_t>(payload);
  checkpoint_io::reader c(b, end, end + 8, f);
  if (c.get(8) != checkpoint_io::fnv1a64(b.data(), end)) throw fail("checksum mismatch: the file is corrupt");

  std::vector<checkpoint_io::record> records;
  checkpoint_io::reader r(b, prefix, end, f);
  for (std::uint32_t i = 0; i < count; ++i) {
    checkpoint_io::record rec{};
    const auto kind = static_cast<std::uint32_t>(r.get(4)), type = static_cast<std::uint32_t>(r.get(4));
    if (kind > 2) throw fail("record " + std::to_string(i) + " has unknown kind " + std::to_string(kind));
    if (type > 1) throw fail("record " + std::to_string(i) + " has unknown element type " + std::to_string(type));
    rec.kind = static_cast<record_kind>(kind);
    rec.type = type == 0 ? dtype::f32 : dtype::f64;
    rec.name = r.bytes_as_string(static_cast<std::size_t>(r.get(4)));
    rec.rows = r.get(8);
    rec.cols = r.get(8);
    rec.offset = r.pos();
    if (rec.rows != 0 && rec.cols > (end - rec.offset) / rec.rows / size_of(rec.type))
      throw fail("record '" + rec.name + "' (" + std::to_string(rec.rows) + "x" + std::to_string(rec.cols) + ") runs past the payload");
    r.skip(static_cast<std::size_t>(rec.rows * rec.cols) * size_of(rec.type));
    records.push_back(std::move(rec));
  }
  if (!r.done()) throw fail("payload has bytes after its " + std::to_string(count) + " records");

  // Match every record to a tensor, and every tensor to a record.
  std::map<std::string, parameter*> params;
  for (parameter* p : m.parameters())
    if (p->value.defined()) params[p->name] = p;
  std::map<std::string, const adamw::slot*> slots;
  if (opt)
    for (const adamw::slot& s : opt->slots()) slots[s.p->name] = &s;
  std::vector<std::pair<tensor, const checkpoint_io::record*>> writes;
  std::map<std::pair<std::uint32_t, std::string>, bool> seen;
  for (const auto& rec : records) {
    if (!seen.emplace(std::make_pair(static_cast<std::uint32_t>(rec.kind), rec.name), true).second)
      throw fail("record '" + rec.name + "' appears twice");
    tensor target;
    bool apply = true;
    if (rec.kind == record_kind::weight) {
      auto it = params.find(rec.name);
      if (it == params.end()) throw fail("weight '" + rec.name + "' is not a parameter of this model");
      target = it->second->value;
    } else if (!opt) {  // loading weights only: the moments must still fit this model (shape checked below)
      auto it = params.find(rec.name);
      if (it == params.end()) throw fail("optimizer state for '" + rec.name + "', which is not a parameter of this model");
      target = it->second->value;
      apply = false;
    } else {
      auto it = slots.find(rec.name);
      if (it == slots.end()) throw fail("optimizer state for '" + rec.name + "', which the optimizer does not train");
      target = rec.kind == record_kind::adam_m ? it->second->m : it->second->v;
    }
    if (target.type() != rec.type || target.rows() != rec.rows || target.cols() != rec.cols)
      throw fail("'" + rec.name + "' is " + name_of(rec.type) + " " + std::to_string(rec.rows) + "x" + std::to_string(rec.cols) +
                 " in the file but " + name_of(target.type()) + " " + std::to_string(target.rows()) + "x" +
                 std::to_string(target.cols()) + " in the model");
    if (apply) writes.emplace_back(target, &rec);
  }
  for (const auto& [name, p] : params)
    if (!seen.count({0u, name})) throw fail("no weight for parameter '" + name + "'");
  if (opt)
    for (const auto& [name, s] : slots)
      if (!seen.count({1u, name}) || !seen.count({2u, name})) throw fail("no optimizer state for '" + name + "'");

  backend& be = m.be();
  for (auto& [t, rec] : writes) {
    std::vector<double> v(t.size());
    const std::uint8_t* p = b.data() + rec->offset;
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::uint64_t bits = 0;
      const std::size_t w = size_of(rec->type);
      for (std::size_t k = 0; k < w; ++k) bits |= std::uint64_t{p[i * w + k]} << (8 * k);
      v[i] = rec->type == dtype::f32 ? static_cast<double>(bit_cast<float>(static_cast<std::uint32_t>(bits))) : bit_cast<double>(bits);
    }
    be.write(t, v);
  }
  for (parameter* p : m.parameters()) ++p->version;  // every quantized copy is stale now
  if (opt) opt->set_steps(info.optimizer_steps);
  return info;
}

}  // namespace nn
MXKIT_END_NAMESPACE
