// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training program's output files (--checkpoint, --csv, --export, --dump-batches), checked
// before the first step, so that no input is destroyed and no run is trained only to fail at its
// first save or at its export after the last step:
//   distinct    no output is an input (--data, the repository's corpora, --resume, --init-from;
//               --checkpoint may be --resume: that is how a run continues) or another output. Files are
//               compared by identity, not spelling: device and inode (stat(2)) for an existing
//               file, so ./x, a/../x, a hard link and a symlink are all x; the canonical path
//               (symlinked folders, "." and ".." resolved) for a file not there yet.
//   theirs      an existing output is replaced only when it is empty or this program's own
//               (output_format): a CSV starts with csv_header, a checkpoint with the checkpoint
//               magic, a batch dump with "MXBATCH1" or "MXBATCH2", an export is safetensors (a u64 header
//               length, then '{'). --overwrite accepts any regular file; a folder, device, pipe
//               or socket (/dev/null too) is never replaced: the save renames a new regular file
//               over the path, which would put a file where the special file was. A sharded
//               export (--export-max-shard) is a folder, empty or holding a Hugging Face index.
//   writable    the folder exists and is a folder, the name fits the file system's NAME_MAX
//               (pathconf(3)), and the temporary that the save writes first (file_io.hpp's
//               replace_file) can be created there: it is created and removed once, under the
//               very name replace_file would choose, so a name that fits but whose temporary
//               does not is found too.
// Each refusal is a usage_error naming the flag, the path and the reason.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <mxkit/config.hpp>
#include <mxkit/io/checkpoint.hpp>
#include <mxkit/file_io.hpp>
#include <mxkit/io/hf_sharded.hpp>
#include <mxkit/io/sharded_checkpoint.hpp>

#include <mxkit/train_program/options.hpp>

#if MXKIT_POSIX_FILE_IO
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#else
#include <cstdio>
#endif

MXKIT_BEGIN_NAMESPACE
namespace train_program {

// The first line of the loss CSV (loss_csv in train_program.cpp writes it). Before tokens,time_s
// it ended at lr: such a file is this program's too (replaced, its rows not kept on --resume).
inline constexpr std::string_view csv_header = "step,loss,eval_loss,tokens_per_s,lr,tokens,time_s\n";
inline constexpr std::string_view csv_header_columns_before_tokens = "step,loss,eval_loss,tokens_per_s,lr";
// The first bytes of a --dump-batches file (dump_batches in train_program.cpp writes it).
inline constexpr std::string_view batch_dump_magic = "MXBATCH1";

// A path given on the command line, with the flag that gave it (for messages).
struct flagged_path {
  const char* flag;
  fs::path path;
  std::string quoted() const { return std::string(flag) + " '" + path.string() + "'"; }
};

// What makes two paths one file (see the top of the file).
struct file_identity {
  bool exists = false;
  std::uint64_t device = 0, inode = 0;  // of an existing file
  fs::path canonical;                   // of a file not there yet
  bool operator==(const file_identity& o) const {
    return exists == o.exists && (exists ? device == o.device && inode == o.inode : canonical == o.canonical);
  }
};

inline file_identity identity_of(const fs::path& p) {
  file_identity id;
  std::error_code ec;
#if MXKIT_POSIX_FILE_IO
  struct stat st {};
  if (::stat(p.c_str(), &st) == 0) {
    id.exists = true;
    id.device = static_cast<std::uint64_t>(st.st_dev);
    id.inode = static_cast<std::uint64_t>(st.st_ino);
    return id;
  }
#else
  if (fs::exists(p, ec)) {  // (no inode here: the canonical path stands in)
    id.canonical = fs::canonical(p, ec);
    if (!ec) return id;
  }
#endif
  id.canonical = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) id.canonical = fs::absolute(p, ec).lexically_normal();
  return id;
}

// No output is an input or another output (--checkpoint may be --resume).
inline void check_distinct(const std::vector<flagged_path>& inputs, const std::vector<flagged_path>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const file_identity out = identity_of(outputs[i].path);
    for (const flagged_path& in : inputs) {
      if (std::string_view(outputs[i].flag) == "--checkpoint" && std::string_view(in.flag) == "--resume") continue;
      if (identity_of(in.path) == out)
        throw usage_error(outputs[i].quoted() + " is the same file as " + in.quoted() + ": writing it would destroy the input");
    }
    for (std::size_t j = 0; j < i; ++j)
      if (identity_of(outputs[j].path) == out)
        throw usage_error(outputs[j].quoted() + " and " + outputs[i].quoted() + " are the same file: each would replace the other");
  }
}

// What an existing output must start with to count as this program's own (see the top of the file).
struct output_format {
  std::size_t prefix_bytes;                  // the bytes is_ours reads (a shorter file is not ours)
  bool (*is_ours)(std::string_view prefix);  // the file's first prefix_bytes bytes
  const char* what;                          // for the refusal: "... exists and is not <what>"
};

inline bool starts_with_csv_header(std::string_view p) {
  const std::size_t n = csv_header_columns_before_tokens.size();
  return p.size() > n && p.substr(0, n) == csv_header_columns_before_tokens && (p[n] == '\n' || p[n] == ',');
}
inline bool starts_with_checkpoint_magic(std::string_view p) {
  return p == std::string_view(mxkit::nn::checkpoint_magic, sizeof mxkit::nn::checkpoint_magic);
}
// "MXBATCH1" (text) or "MXBATCH2" (token datasets: int32 tokens).
inline bool starts_with_batch_magic(std::string_view p) { return p == batch_dump_magic || p == "MXBATCH2"; }
// safetensors: a little-endian u64 header length (not 0), then the JSON header's '{'.
inline bool starts_like_safetensors(std::string_view p) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(p[static_cast<std::size_t>(i)])} << (8 * i);
  return n > 0 && p[8] == '{';
}

inline constexpr output_format csv_format{csv_header_columns_before_tokens.size() + 1, starts_with_csv_header,
                                          "this program's loss CSV (its first line is not the CSV header)"};
inline constexpr output_format checkpoint_format{sizeof mxkit::nn::checkpoint_magic, starts_with_checkpoint_magic,
                                                 "an mxkit checkpoint (no MXKITCKP magic)"};
inline constexpr output_format export_format{9, starts_like_safetensors, "a safetensors file (no header length and '{')"};
inline constexpr output_format batches_format{batch_dump_magic.size(), starts_with_batch_magic,
                                              "this program's batch dump (no MXBATCH1 or MXBATCH2 magic)"};

// An existing output is this program's, empty, or --overwrite says to replace it.
inline void check_replaceable(const flagged_path& out, const output_format& format, bool overwrite) {
  std::error_code ec;
  const fs::file_status st = fs::status(out.path, ec);
  if (!fs::exists(st)) return;  // nothing to replace (or a folder that is not there: check_writable says so)
  if (fs::is_directory(st)) throw usage_error(out.quoted() + " is a folder; give a file name");
  if (!fs::is_regular_file(st))
    throw usage_error(out.quoted() + " is not a regular file (a device, pipe or socket); the run replaces its outputs, so give "
                                     "the path of a regular file");
  if (overwrite || fs::file_size(out.path, ec) == 0) return;
  std::string start(format.prefix_bytes, '\0');
  std::size_t got = 0;
  try {
    mxkit::detail::input_file in(out.path);
    got = in.read(start.data(), start.size());
  } catch (const std::system_error& e) {
    throw usage_error(out.quoted() + " exists and cannot be read to check that it is " + format.what + " (" + e.what() +
                      "); not replacing it (--overwrite replaces it anyway)");
  }
  if (got < start.size() || !format.is_ours(start))
    throw usage_error(out.quoted() + " exists and is not " + format.what + "; not replacing it (--overwrite replaces it anyway)");
}

// The output can be saved: its folder exists, its name and its temporary's name fit, and a file
// can be created there.
inline void check_writable(const flagged_path& out) {
  const fs::path name = out.path.filename();
  if (name.empty() || name == "." || name == "..") throw usage_error(out.quoted() + " names a folder, not a file");
  const fs::path dir = out.path.parent_path().empty() ? fs::path(".") : out.path.parent_path();
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::is_directory(st)) {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      throw usage_error(out.quoted() + ": its folder '" + dir.string() + "' cannot be examined: " + ec.message());
    throw usage_error(out.quoted() + ": its folder '" + dir.string() + "' " +
                      (fs::exists(st) || ec == std::errc::not_a_directory ? "is not a folder (part of the path is a file)"
                                                                          : "does not exist"));
  }
#if MXKIT_POSIX_FILE_IO
  errno = 0;
  const long pc = ::pathconf(dir.c_str(), _PC_NAME_MAX);  // -1 with errno 0: no limit
  const std::size_t name_max = pc > 0 ? static_cast<std::size_t>(pc) : 255;
  if (name.string().size() > name_max)
    throw usage_error(out.quoted() + ": the file name is " + std::to_string(name.string().size()) + " bytes, longer than the " +
                      std::to_string(name_max) + " bytes a name may have in '" + dir.string() + "'");
  // Create and remove the temporary the save would write first (O_EXCL: never an existing file).
  for (int attempt = 1;; ++attempt) {
    const fs::path probe = mxkit::detail::temporary_name(out.path);
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(probe.c_str());
      return;
    }
    const int err = errno;
    if (err == EEXIST && attempt < 10) continue;
    const std::string reason = std::generic_category().message(err);
    if (err == ENAMETOOLONG)
      throw usage_error(out.quoted() + ": the temporary file the save writes first, '" + probe.filename().string() + "' (" +
                        std::to_string(probe.filename().string().size()) + " bytes), is too long a name for '" + dir.string() +
                        "' (" + reason + "); give a shorter name");
    throw usage_error(out.quoted() + ": cannot create a file in '" + dir.string() + "', as the save must (" + reason + ")");
  }
#else
  const fs::path probe = mxkit::detail::temporary_name(out.path);
  std::FILE* f = std::fopen(probe.string().c_str(), "wbx");
  if (!f) throw usage_error(out.quoted() + ": cannot create a file in '" + dir.string() + "', as the save must");
  std::fclose(f);
  fs::remove(probe, ec);
#endif
}

// A --checkpoint of several ranks is a folder of shards (io/sharded_checkpoint.hpp): it may exist
// if it is empty or holds a manifest (this program's), else --overwrite must say so.
inline void check_shard_folder(const flagged_path& out, bool overwrite) {
  std::error_code ec;
  const fs::file_status st = fs::status(out.path, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) throw usage_error(out.quoted() + " is a file; several ranks save a folder of shards there");
  if (overwrite || fs::is_empty(out.path, ec)) return;
  if (!fs::is_regular_file(mxkit::nn::manifest_path(out.path), ec))
    throw usage_error(out.quoted() + " is a folder without a sharded checkpoint's manifest; not writing into it (--overwrite does)");
}

// --export with --export-max-shard is a folder (io/hf_sharded.hpp): it may exist if it is empty or
// holds a Hugging Face index (a checkpoint the export replaces), else --overwrite must say so; the
// index is then written in it, the shards beside it.
inline void check_export_folder(const flagged_path& out, bool overwrite) {
  std::error_code ec;
  const fs::file_status st = fs::status(out.path, ec);
  if (!fs::exists(st)) return check_writable(out);  // made by the export: its parent must take it
  if (!fs::is_directory(st))
    throw usage_error(out.quoted() + " is a file; --export-max-shard writes a folder of shards and an index there");
  if (!overwrite && !fs::is_empty(out.path, ec) && !fs::is_regular_file(out.path / mxkit::nn::hf_index_name, ec))
    throw usage_error(out.quoted() + " is a folder without a Hugging Face index (" + mxkit::nn::hf_index_name +
                      "); not writing shards into it (--overwrite does)");
  check_writable({out.flag, out.path / mxkit::nn::hf_index_name});
}

// All three checks on every output of the run; `inputs` are the files the run reads. A sharded
// run's --checkpoint is a folder (check_shard_folder).
inline void check_outputs(const options& o, const std::vector<flagged_path>& inputs, bool sharded_checkpoint = false) {
  struct output {
    flagged_path path;
    const output_format* format;  // null: a folder of shards
  };
  std::vector<output> outputs;
  if (!o.checkpoint.empty()) outputs.push_back({{"--checkpoint", o.checkpoint}, sharded_checkpoint ? nullptr : &checkpoint_format});
  if (!o.csv.empty()) outputs.push_back({{"--csv", o.csv}, &csv_format});
  // (A folder of shards: compared with the inputs by its index, the file an earlier export left.)
  const bool shards = o.export_max_shard > 0;
  if (!o.export_path.empty())
    outputs.push_back({{"--export", shards ? o.export_path / mxkit::nn::hf_index_name : o.export_path}, shards ? nullptr : &export_format});
  if (!o.dump_batches.empty()) outputs.push_back({{"--dump-batches", o.dump_batches}, &batches_format});
  std::vector<flagged_path> paths;
  for (const output& out : outputs) paths.push_back(out.path);
  check_distinct(inputs, paths);
  for (const output& out : outputs) {
    if (std::string_view(out.path.flag) == "--export" && shards) {
      check_export_folder({"--export", o.export_path}, o.overwrite);
      continue;
    }
    if (out.format) check_replaceable(out.path, *out.format, o.overwrite);
    else check_shard_folder(out.path, o.overwrite);
    check_writable(out.path);
  }
}

}  // namespace train_program
MXKIT_END_NAMESPACE
