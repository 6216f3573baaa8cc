// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hugging Face sharded checkpoints, the form Llama 3.1 8B is published in (transformers'
// save_pretrained(max_shard_size=...)): a folder of safetensors files and an index,
//   model.safetensors.index.json      {"metadata": {"total_size": N}, "weight_map": {"<tensor>": "<shard>", ...}}
//   model-00001-of-00004.safetensors  ... (each an ordinary safetensors file, io/safetensors.hpp)
// with the tensors under the Llama names of io/hf_llama.hpp. total_size is the byte size of the
// tensors the index lists (huggingface_hub's split_state_dict_into_shards_factory sums them).
//
// Reading (import_hf_checkpoint): --init-from names the index, its folder, or a single safetensors
// file (a folder without an index: its model.safetensors). What is checked, all before any weight
// is written, each refusal naming the index or shard file and the tensor:
//   the index     an object with "weight_map" (tensor name -> shard file) and an optional
//                 "metadata" (strings and unsigned integers; total_size an integer); a tensor
//                 listed twice, or a shard name that is empty, absolute or has a ".." part
//                 (outside the index's folder), is refused. The check is on the name, not on where
//                 a symbolic link leads: the Hugging Face hub's cache links every shard of a
//                 snapshot to a blob elsewhere (snapshots/<revision>/x -> ../../blobs/<hash>).
//   the shards    every shard the index names exists and is a safetensors file with every check
//                 of io/safetensors.hpp (F32 or BF16, sizes, offsets, the file's size); every
//                 tensor the index lists is in its shard, and every tensor of a shard is listed,
//                 for that shard (else it is in two shards, or an extra tensor); total_size, where
//                 given, is what the listed tensors hold.
//   the model     what the single-file import checks (io/hf_llama.hpp): every tensor of the model
//                 present with its shape, no other tensor, each shard's "mxkit.*" metadata (where
//                 present) the model's.
// Memory: the shards' headers are read first (a few kB each) and kept; then each shard is opened
// in turn, one at a time, and each tensor's elements are read with a seek and at most
// `chunk_elements` at a time (4 MiB of F32), widened and written into the parameter through a view
// of its memory. Host memory is bounded by one chunk (and the headers), never a whole tensor, a
// whole shard or the model's state dict. Under full sharding (hf_rank_targets) a rank reads, of
// each tensor, only the elements of its own shard of the parameter (data_parallel::pieces()).
// A base built layer by layer, never whole, reads the same checkpoint parameter by parameter
// with the same checks (check_hf_catalog) and the same chunked read (read_hf_elements):
// io/hf_streamed_import.hpp.
//
// Writing (export_hf_sharded): the tensors in the model's order (embedding, layers, final norm,
// head), cut into shards as huggingface_hub's split_state_dict_into_shards_factory cuts them: a
// new shard when the next tensor would take the current one past the maximum, a tensor larger than
// the maximum alone in a shard of its own (the current one staying open); the shards named model-0000i-of-0000n.safetensors, the index (keys
// sorted, indent 2, as transformers writes it) always, even for one shard, and last, so that an
// index never names a shard not yet written. Shards of an earlier export in the folder
// (model-NNNNN-of-NNNNN.safetensors not among the new ones) are then removed, as transformers'
// save_pretrained does, so that the folder holds one checkpoint. Each shard is built from the
// model's weights one shard at a time (host memory: one shard).
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/file_io.hpp>
#include <mxkit/io/hf_llama.hpp>
#include <mxkit/io/json_reader.hpp>
#include <mxkit/io/safetensors.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/parallel/data_parallel.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

inline constexpr const char* hf_index_name = "model.safetensors.index.json";
inline constexpr std::uint64_t hf_index_max_bytes = 100'000'000;  // (the 405B model's index is about 100 kB)

// A parsed index; shard names as written, relative to `folder`.
struct hf_index {
  std::filesystem::path file, folder;
  std::optional<std::uint64_t> total_size;
  std::map<std::string, std::string> metadata;                  // the other metadata entries, as text
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> shard, in the file's order
  std::vector<std::string> shards() const {                     // each shard once, in first-listed order
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (const auto& [t, s] : weight_map)
      if (seen.insert(s).second) out.push_back(s);
    return out;
  }
};

namespace hf_detail {

// A shard name that stays in the index's folder (see the top of the file).
inline std::optional<std::string> outside_folder(const std::string& name) {
  if (name.empty()) return "is empty";
  const std::filesystem::path p(name);
  if (p.is_absolute() || p.has_root_path()) return "is an absolute path, outside the index's folder";
  for (const std::filesystem::path& part : p)
    if (part == "..") return "has a '..' part: it may lead outside the index's folder";
  if (p.filename().empty() || p.filename() == ".") return "names a folder, not a file";
  return std::nullopt;
}

inline std::string shape_text(const std::vector<std::uint64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace hf_detail

// Parses an index's text; `file` names it in errors. Throws safetensors_error.
inline hf_index parse_hf_index(std::string_view json, const std::filesystem::path& file) {
  const std::string prefix = "Hugging Face index '" + file.string() + "': ";
  hf_index x;
  x.file = file;
  x.folder = file.parent_path();
  try {
    if (!json::valid_utf8(json)) throw safetensors_error("the index is not valid UTF-8");
    json::reader r(json, "index JSON");
    bool has_map = false;
    r.object([&](const std::string& key) {
      if (key == "metadata") {
        r.object([&](const std::string& k) {
          if (r.next_is('"')) {
            if (k == "total_size") r.error("metadata total_size is a string, not an integer");
            x.metadata[k] = r.string();
          } else {
            const std::uint64_t v = r.unsigned_integer();  // (refuses anything else: a float, a sign, null)
            if (k == "total_size") x.total_size = v;
            else x.metadata[k] = std::to_string(v);
          }
        });
      } else if (key == "weight_map") {
        has_map = true;
        // The reader refuses a key given twice: a tensor mapped to two shards by the index itself.
        r.object([&](const std::string& tensor) {
          if (!r.next_is('"')) r.error("the shard of tensor '" + tensor + "' is not a string");
          std::string shard = r.string();
          if (const std::optional<std::string> why = hf_detail::outside_folder(shard))
            throw safetensors_error("weight_map maps tensor '" + tensor + "' to '" + shard + "', which " + *why);
          x.weight_map.emplace_back(tensor, std::move(shard));
        });
      } else {
        r.error("unknown key \"" + key + "\" (an index has \"metadata\" and \"weight_map\")");
      }
    });
    if (!r.at_end()) r.error("unexpected bytes after the index object");
    if (!has_map) throw safetensors_error("no \"weight_map\"");
  } catch (const json::error& e) {
    throw safetensors_error(prefix + e.what());
  } catch (const safetensors_error& e) {
    throw safetensors_error(prefix + e.what());
  }
  return x;
}

inline hf_index read_hf_index(const std::filesystem::path& file) {
  std::string text;
  try {
    detail::input_file in(file);
    if (in.is_directory()) throw std::system_error(std::make_error_code(std::errc::is_a_directory), "is a directory");
    char buf[1 << 16];
    for (std::size_t got = sizeof buf; got == sizeof buf;) {
      got = in.read(buf, sizeof buf);
      text.append(buf, got);
      if (text.size() > hf_index_max_bytes)
        throw safetensors_error("Hugging Face index '" + file.string() + "': larger than " + std::to_string(hf_index_max_bytes) + " bytes");
    }
  } catch (const std::system_error& e) {
    throw safetensors_error("Hugging Face index '" + file.string() + "': " + e.what());
  }
  return parse_hf_index(text, file);
}

// What --init-from names: the index file, or a single safetensors file. A folder: its index, else
// its model.safetensors. A file is told by its content: safetensors starts with a u64 header size
// that fits the file and then '{'; an index with '{'.
struct hf_source {
  std::filesystem::path path;
  bool index = false;
};
inline hf_source hf_source_of(const std::filesystem::path& p) {
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) {
    if (std::filesystem::exists(p / hf_index_name, ec)) return {p / hf_index_name, true};
    if (std::filesystem::exists(p / "model.safetensors", ec)) return {p / "model.safetensors", false};
    throw safetensors_error("folder '" + p.string() + "' holds neither " + hf_index_name + " nor model.safetensors");
  }
  std::string head(16, '\0');
  std::size_t got = 0;
  std::optional<std::uint64_t> size;
  try {
    detail::input_file in(p);
    size = in.regular_size();
    got = in.read(head.data(), head.size());
  } catch (const std::system_error&) {
    return {p, false};  // (the safetensors reader says why it cannot be read)
  }
  head.resize(got);
  if (got >= 9 && head[8] == '{') {
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(head[static_cast<std::size_t>(i)])} << (8 * i);
    if (!size || n <= *size - 8) return {p, false};
  }
  const std::size_t first = head.find_first_not_of(" \t\r\n");
  return {p, first != std::string::npos && head[first] == '{'};
}

// Every file of a checkpoint (the index and its shards, or the one file): the program's inputs,
// which no output may replace. Unreadable indexes give their own path only (the import says why).
inline std::vector<std::filesystem::path> hf_checkpoint_files(const std::filesystem::path& p) {
  try {
    const hf_source s = hf_source_of(p);
    if (!s.index) return {s.path};
    const hf_index x = read_hf_index(s.path);
    std::vector<std::filesystem::path> out{s.path};
    for (const std::string& shard : x.shards()) out.push_back(x.folder / shard);
    return out;
  } catch (const safetensors_error&) {
    return {p};
  }
}

// The tensors of a checkpoint, from its headers: where each one is.
struct hf_catalog {
  std::string what;                            // "Hugging Face index '<file>'" or "safetensors '<file>'"
  std::vector<std::string> shard_names;        // as the index writes them (the file name for one file)
  std::vector<std::filesystem::path> shard_paths;
  std::vector<safetensors_header> headers;     // per shard
  struct place {
    std::size_t shard;
    const safetensors_entry* entry;  // in headers[shard]
  };
  std::map<std::string, place> tensors;
  std::uint64_t bytes = 0;  // of every tensor
  std::string where(const std::string& tensor) const {
    const auto it = tensors.find(tensor);
    return it == tensors.end() ? std::string() : " (shard '" + shard_names[it->second.shard] + "')";
  }
};

// Reads and checks the index and every shard's header (see the top of the file). Throws
// safetensors_error naming the file and the tensor.
inline hf_catalog open_hf_checkpoint(const std::filesystem::path& path) {
  const hf_source s = hf_source_of(path);
  hf_catalog c;
  std::optional<hf_index> x;
  if (!s.index) {
    c.what = "safetensors '" + s.path.string() + "'";
    c.shard_names = {s.path.filename().string()};
    c.shard_paths = {s.path};
    c.headers.push_back(read_safetensors_header(s.path));
  } else {
    x = read_hf_index(s.path);
    c.what = "Hugging Face index '" + s.path.string() + "'";
    c.shard_names = x->shards();
    for (const std::string& name : c.shard_names) {
      c.shard_paths.push_back(x->folder / name);
      try {
        c.headers.push_back(read_safetensors_header(c.shard_paths.back()));
      } catch (const safetensors_error& e) {
        throw safetensors_error(c.what + ": shard '" + name + "': " + e.what());
      }
    }
  }
  auto bad = [&](const std::string& why) { throw safetensors_error(c.what + ": " + why); };
  // Where each shard's tensors are; a name in two headers is in two shards.
  std::map<std::string, std::size_t> in_header;
  for (std::size_t i = 0; i < c.headers.size(); ++i)
    for (const safetensors_entry& e : c.headers[i].tensors) {
      const auto [it, fresh] = in_header.emplace(e.name, i);
      if (!fresh)
        bad("tensor '" + e.name + "' is in two shards, '" + std::min(c.shard_names[it->second], c.shard_names[i]) + "' and '" +
            std::max(c.shard_names[it->second], c.shard_names[i]) + "'");
    }
  if (!x) {
    for (const safetensors_entry& e : c.headers[0].tensors) c.tensors.emplace(e.name, hf_catalog::place{0, &e});
  } else {
    std::map<std::string, std::size_t> shard_of;
    for (std::size_t i = 0; i < c.shard_names.size(); ++i) shard_of[c.shard_names[i]] = i;
    std::uint64_t listed = 0;
    for (const auto& [tensor, shard] : x->weight_map) {
      const std::size_t i = shard_of.at(shard);
      const safetensors_entry* e = c.headers[i].find(tensor);
      if (!e) {
        const auto other = in_header.find(tensor);
        bad("tensor '" + tensor + "': the index maps it to shard '" + shard + "', which has no such tensor" +
            (other != in_header.end() ? " (it is in shard '" + c.shard_names[other->second] + "')" : ""));
      }
      listed += e->end - e->begin;
      c.tensors.emplace(tensor, hf_catalog::place{i, e});
    }
    for (const auto& [tensor, i] : in_header)
      if (!c.tensors.count(tensor))
        bad("shard '" + c.shard_names[i] + "' holds tensor '" + tensor + "', which the index's weight_map does not list");
    if (x->total_size && *x->total_size != listed)
      bad("metadata total_size is " + std::to_string(*x->total_size) + ", the tensors the index lists hold " + std::to_string(listed) +
          " bytes");
  }
  for (const auto& [name, p] : c.tensors) c.bytes += p.entry->end - p.entry->begin;
  return c;
}

// The model's checks of a checkpoint (the single-file import's, io/hf_llama.hpp), from its
// headers alone: each shard's "mxkit.*" metadata, where present, the configuration's; every
// tensor of the layout present with its shape; no other tensor. Returns the layout (hf_llama_layout_of).
// Throws safetensors_error naming the file and the tensor.
inline std::vector<hf_llama_tensor> check_hf_catalog(const hf_catalog& c, const model_config& mc) {
  auto bad = [&](const std::string& why) { throw safetensors_error(c.what + ": " + why); };
  const std::map<std::string, std::string> meta = hf_llama_metadata(mc);
  for (std::size_t i = 0; i < c.headers.size(); ++i)
    for (const auto& [key, value] : meta)
      if (key.rfind("mxkit.", 0) == 0)
        if (auto it = c.headers[i].metadata.find(key); it != c.headers[i].metadata.end() && it->second != value)
          bad("shard '" + c.shard_names[i] + "': metadata " + key + " is " + it->second + ", the model has " + value);
  std::vector<hf_llama_tensor> layout = hf_llama_layout_of(mc);
  std::set<std::string> names;
  for (const hf_llama_tensor& t : layout) names.insert(t.name);
  for (const auto& [name, p] : c.tensors)
    if (!names.count(name))
      bad("tensor '" + name + "'" + c.where(name) + " is not a weight of this model (a Llama of " + std::to_string(mc.n_layers) + " layers)");
  for (const hf_llama_tensor& t : layout) {
    const auto it = c.tensors.find(t.name);
    if (it == c.tensors.end()) bad("no tensor '" + t.name + "'");
    const std::vector<std::uint64_t> want = t.vector ? std::vector<std::uint64_t>{t.cols} : std::vector<std::uint64_t>{t.rows, t.cols};
    if (it->second.entry->shape != want)
      bad("tensor '" + t.name + "'" + c.where(t.name) + " has shape " + hf_detail::shape_text(it->second.entry->shape) +
          ", the model needs " + hf_detail::shape_text(want));
  }
  return layout;
}

// Elements [a, b) (row-major) of tensor `e` of an open shard (`h` its header) into `dest`
// (b - a elements), read with a seek and at most `chunk_elements` at a time, F32 as it is and BF16
// widened exactly; `raw` and `values` are the caller's buffers (one chunk each). Returns the bytes
// read. Throws safetensors_error (the caller names the shard) or std::system_error.
inline std::uint64_t read_hf_elements(backend& be, detail::input_file& in, const safetensors_header& h, const safetensors_entry& e,
                                      std::size_t a, std::size_t b, const tensor& dest, std::size_t chunk_elements,
                                      std::vector<std::uint8_t>& raw, std::vector<double>& values) {
  detail::require(chunk_elements > 0, "read_hf_elements: chunk_elements must be positive");
  const std::size_t size = safetensors_dtype_size(e.dtype);
  std::uint64_t bytes = 0;
  for (std::size_t at = a; at < b;) {
    const std::size_t n = std::min(chunk_elements, b - at);
    in.seek(8 + h.header_bytes + e.begin + at * size);
    raw.resize(n * size);
    if (in.read(raw.data(), raw.size()) < raw.size())
      throw safetensors_error("truncated inside tensor '" + e.name + "' (the file changed since its header was read)");
    bytes += raw.size();
    values.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint8_t* q = raw.data() + k * size;
      std::uint32_t bits = 0;
      if (e.dtype == safetensors_dtype::f32) {
        for (int j = 0; j < 4; ++j) bits |= std::uint32_t{q[j]} << (8 * j);
      } else {
        bits = static_cast<std::uint32_t>(q[0] | (q[1] << 8)) << 16;  // BF16 widened exactly
      }
      values[k] = bit_cast<float>(bits);
    }
    tensor piece = view_of(dest, at - a, 1, n);
    be.write(piece, values);
    at += n;
  }
  return bytes;
}

// Where a tensor's values go: elements [first, first + values.size()) of `whole`'s row-major
// values, held by `values` (the parameter's own memory, or a rank's shard of it).
struct hf_import_target {
  parameter* whole;
  tensor values;
  std::size_t first;
};

// Every parameter's own memory (one rank, or every rank holding every weight).
inline std::vector<hf_import_target> hf_whole_targets(model& m) {
  std::vector<hf_import_target> out;
  for (parameter* p : m.parameters())
    if (p->value.defined()) out.push_back({p, view_of(p->value, 0, 1, p->value.size()), 0});
  return out;
}

// This rank's memory of each parameter: under full sharding its pieces (data_parallel.hpp), and
// the parameters it holds whole; else every parameter whole.
inline std::vector<hf_import_target> hf_rank_targets(model& m, data_parallel& dp) {
  if (!dp.fully_sharded()) return hf_whole_targets(m);
  std::vector<hf_import_target> out;
  std::set<const parameter*> sharded;
  for (const data_parallel::piece_ref& r : dp.pieces()) {
    out.push_back({r.whole, r.piece->value, r.begin});
    sharded.insert(r.whole);
  }
  for (parameter* p : m.parameters())
    if (p->value.defined() && !sharded.count(p)) out.push_back({p, view_of(p->value, 0, 1, p->value.size()), 0});
  return out;
}

struct hf_import_stats {
  std::size_t tensors = 0, shards = 0;
  std::uint64_t bytes = 0;       // the checkpoint's tensors
  std::uint64_t bytes_read = 0;  // what this call read of them
};

// Loads the model's weights (master copies) from a checkpoint (see the top of the file) into
// `targets`, which must cover every element this process holds. Throws safetensors_error; nothing
// is written unless every check passes. Optimizer state is not part of it (a fresh AdamW).
inline hf_import_stats import_hf_checkpoint(const std::filesystem::path& path, model& m, const std::vector<hf_import_target>& targets,
                                            std::size_t chunk_elements = std::size_t{1} << 20) {
  const hf_catalog c = open_hf_checkpoint(path);
  (void)check_hf_catalog(c, m.config());
  const std::vector<hf_llama_tensor> layout = hf_llama_layout_shapes(m);
  std::map<std::string, const hf_llama_tensor*> by_name;
  for (const hf_llama_tensor& t : layout) by_name[t.name] = &t;
  std::map<const parameter*, std::vector<const hf_import_target*>> targets_of;
  for (const hf_import_target& t : targets) targets_of[t.whole].push_back(&t);

  // Streaming, one shard at a time, its tensors in file order.
  hf_import_stats stats;
  stats.tensors = c.tensors.size();
  stats.shards = c.shard_paths.size();
  stats.bytes = c.bytes;
  backend& be = m.be();
  std::set<parameter*> written;
  std::vector<std::uint8_t> raw;
  std::vector<double> values;
  for (std::size_t i = 0; i < c.shard_paths.size(); ++i) {
    const std::string shard = c.what + ": shard '" + c.shard_names[i] + "': ";
    std::optional<detail::input_file> in;
    try {
      in.emplace(c.shard_paths[i]);
      for (const safetensors_entry& e : c.headers[i].tensors) {
        const hf_llama_tensor& t = *by_name.at(e.name);
        const std::size_t lo = t.row0 * t.cols, hi = lo + t.rows * t.cols;  // the tensor's elements of the parameter
        const auto found = targets_of.find(t.p);
        if (found == targets_of.end()) continue;
        for (const hf_import_target* d : found->second) {
          const std::size_t a = std::max(lo, d->first), b = std::min(hi, d->first + d->values.size());
          if (a < b) stats.bytes_read += read_hf_elements(be, *in, c.headers[i], e, a - lo, b - lo, view_of(d->values, a - d->first, 1, b - a),
                                                          chunk_elements, raw, values);
          written.insert(t.p);
        }
      }
    } catch (const safetensors_error& e) {
      throw safetensors_error(shard + e.what());
    } catch (const std::system_error& e) {
      throw safetensors_error(shard + e.what());
    }
  }
  for (parameter* p : written) ++p->version;  // every quantized copy is stale now
  return stats;
}

inline hf_import_stats import_hf_checkpoint(const std::filesystem::path& path, model& m) {
  return import_hf_checkpoint(path, m, hf_whole_targets(m));
}

// The shard files of n shards: model-00001-of-0000n.safetensors (huggingface_hub's FILENAME_PATTERN
// "model{suffix}.safetensors", suffix "-{i:05d}-of-{n:05d}").
inline std::string hf_shard_name(std::size_t i, std::size_t n) {
  char b[64];
  std::snprintf(b, sizeof b, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return b;
}

inline bool is_hf_shard_name(const std::string& s) {
  // model-NNNNN-of-NNNNN.safetensors (five digits or more each, as %05zu writes them)
  const std::string pre = "model-", mid = "-of-", post = ".safetensors";
  if (s.size() < pre.size() + 5 + mid.size() + 5 + post.size() || s.rfind(pre, 0) != 0 ||
      s.compare(s.size() - post.size(), post.size(), post) != 0)
    return false;
  const std::string core = s.substr(pre.size(), s.size() - pre.size() - post.size());
  const std::size_t m = core.find(mid);
  if (m == std::string::npos) return false;
  const std::string a = core.substr(0, m), b = core.substr(m + mid.size());
  auto digits = [](const std::string& x) { return x.size() >= 5 && std::all_of(x.begin(), x.end(), [](char ch) { return ch >= '0' && ch <= '9'; }); };
  return digits(a) && digits(b);
}

struct hf_export_result {
  std::vector<std::string> shards;
  std::uint64_t total_size = 0;
};

// Writes the model's weights (master copies; F32 bit-exact, BF16 rounded to nearest even) into
// `folder` (created if missing) as shards of at most max_shard_bytes each (see the top of the
// file). Throws safetensors_error.
inline hf_export_result export_hf_sharded(const std::filesystem::path& folder, model& m, safetensors_dtype dtype,
                                          std::uint64_t max_shard_bytes) {
  detail::require(max_shard_bytes > 0, "export_hf_sharded: max_shard_bytes must be positive");
  const std::string what = "Hugging Face checkpoint '" + folder.string() + "': ";
  const std::vector<hf_llama_tensor> layout = hf_llama_layout(m);
  const std::uint64_t element = safetensors_dtype_size(dtype);
  // huggingface_hub's rule: a tensor larger than the maximum becomes a shard of its own at once,
  // while the shard being filled stays open; the one being filled is closed when the next tensor
  // would take it past the maximum, and at the end.
  std::vector<std::vector<std::size_t>> cut;  // tensors (layout indices) per shard
  std::vector<std::size_t> open;
  std::uint64_t open_bytes = 0;
  hf_export_result out;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const std::uint64_t bytes = std::uint64_t{layout[i].rows} * layout[i].cols * element;
    out.total_size += bytes;
    if (bytes > max_shard_bytes) {
      cut.push_back({i});
      continue;
    }
    if (!open.empty() && open_bytes + bytes > max_shard_bytes) {
      cut.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
    open.push_back(i);
    open_bytes += bytes;
  }
  if (!open.empty()) cut.push_back(std::move(open));
  std::error_code ec;
  std::filesystem::create_directory(folder, ec);
  if (ec || !std::filesystem::is_directory(folder, ec))
    throw safetensors_error(what + "cannot create the folder" + (ec ? ": " + ec.message() : std::string()));
  const std::map<std::string, std::string> meta = hf_llama_metadata(m);
  std::map<std::string, std::string> weight_map;
  for (std::size_t s = 0; s < cut.size(); ++s) {
    out.shards.push_back(hf_shard_name(s, cut.size()));
    std::vector<safetensors_tensor> tensors;
    for (std::size_t i : cut[s]) {
      const hf_llama_tensor& t = layout[i];
      const std::vector<double> v = m.be().read(view_of(t.p->value, t.row0 * t.cols, 1, t.rows * t.cols));
      safetensors_tensor x{t.name, t.vector ? std::vector<std::uint64_t>{t.cols} : std::vector<std::uint64_t>{t.rows, t.cols}, {}};
      x.values.assign(v.begin(), v.end());
      tensors.push_back(std::move(x));
      weight_map[t.name] = out.shards.back();
    }
    write_safetensors(folder / out.shards.back(), tensors, dtype, meta);
  }
  std::string index = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(out.total_size) + "\n  },\n  \"weight_map\": {\n";
  std::size_t k = 0;
  for (const auto& [name, shard] : weight_map)
    index += "    " + json::quoted(name) + ": " + json::quoted(shard) + (++k < weight_map.size() ? ",\n" : "\n");
  index += "  }\n}\n";
  try {
    detail::replace_file(folder / hf_index_name, index.data(), index.size());
  } catch (const std::system_error& e) {
    throw safetensors_error(what + e.what());
  }
  // (Listed first, removed after: a folder changed while it is read may or may not show the change.)
  const std::set<std::string> fresh(out.shards.begin(), out.shards.end());
  std::vector<std::filesystem::path> stale;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_hf_shard_name(name) && !fresh.count(name) && entry.is_regular_file(ec)) stale.push_back(entry.path());
  }
  for (const std::filesystem::path& p : stale) std::filesystem::remove(p, ec);
  return out;
}

}  // namespace nn
MXKIT_END_NAMESPACE
