// SPDX-License-Identifier: Apache-2.0
#pragma once
// A whole file, read-only, as bytes: memory-mapped (mmap(2), PROT_READ, MAP_PRIVATE) where POSIX
// is there, so a token dataset of many gigabytes costs address space and page cache, not heap.
// Elsewhere the file is read into memory through file_io.hpp's checked reads.
//
// The readers of train/ use it for Megatron's .idx/.bin pair (Megatron maps both too:
// megatron/core/datasets/indexed_dataset.py, _IndexReader and _MMapBinReader, numpy.memmap) and for
// .npy arrays. Only regular files are mapped: a folder, a pipe or a device is refused naming the
// path, since a pipe has no size to validate a header against. A file shortened by another
// process while it is mapped makes reads past the new end fault (SIGBUS); what this class can do
// is check the size once, at open, before anything is read.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/file_io.hpp>

#if MXKIT_POSIX_FILE_IO
#include <sys/mman.h>
#endif

MXKIT_BEGIN_NAMESPACE
namespace nn {

class mapped_file {
 public:
  mapped_file() = default;
  // `role` names the file in messages ("Megatron index", ".npy array", ...).
  mapped_file(const std::filesystem::path& path, const std::string& role) : path_(path) {
    const std::string name = role + " '" + path.string() + "'";
    std::optional<detail::input_file> in;
    try {
      in.emplace(path);
    } catch (const std::system_error& e) {
      detail::fail(name, ": ", e.what());
    }
    detail::require(!in->is_directory(), name, " is a folder, not a file");
    detail::require(in->regular_size().has_value(), name, " is not a regular file (a device, pipe or socket): a dataset must have a size");
    const std::uint64_t size = *in->regular_size();
    detail::require(size <= static_cast<std::uint64_t>(SIZE_MAX), name, ": its ", size, " bytes do not fit in the address space");
    size_ = static_cast<std::size_t>(size);
    if (size_ == 0) return;  // (mmap refuses length 0: an empty file is an empty span)
#if MXKIT_POSIX_FILE_IO
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      detail::fail(name, ": cannot open the file: ", std::generic_category().message(err));
    }
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file (mmap(2): closing the descriptor does not unmap)
    if (p == MAP_FAILED) detail::fail(name, ": cannot map its ", size_, " bytes: ", std::generic_category().message(err));
    map_ = p;
#else
    try {
      copy_.resize(size_);
      const std::size_t got = in->read(copy_.data(), size_);
      detail::require(got == size_, name, ": read ", got, " of its ", size_, " bytes (the file shrank while it was read)");
    } catch (const std::system_error& e) {
      detail::fail(name, ": ", e.what());
    }
#endif
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept { swap(o); }
  mapped_file& operator=(mapped_file&& o) noexcept {
    mapped_file t(std::move(o));
    swap(t);
    return *this;
  }
  ~mapped_file() {
#if MXKIT_POSIX_FILE_IO
    if (map_) ::munmap(map_, size_);
#endif
  }

  std::span<const std::byte> bytes() const noexcept {
#if MXKIT_POSIX_FILE_IO
    return {static_cast<const std::byte*>(map_), size_};
#else
    return {reinterpret_cast<const std::byte*>(copy_.data()), size_};
#endif
  }
  std::size_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  std::size_t size_ = 0;
#if MXKIT_POSIX_FILE_IO
  void* map_ = nullptr;
#else
  std::vector<char> copy_;
#endif
  void swap(mapped_file& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(size_, o.size_);
#if MXKIT_POSIX_FILE_IO
    std::swap(map_, o.map_);
#else
    std::swap(copy_, o.copy_);
#endif
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
