// SPDX-License-Identifier: Apache-2.0
#pragma once
// What one collective call of gpu::nccl_communicator (gpu/parallel/nccl_communicator.hpp) is, and
// nccl_options::verify_calls' comparison of the ranks' calls. Apart from the communicator: the
// description and the comparison are plain host code; the communicator all-gathers the table.
//
// A mismatched call (another collective, count or type on another rank) can make NCCL hang (then
// the timeout ends it) or, for a few shapes, complete with wrong data. nccl_options::verify_calls
// rules the second out: every collective first all-gathers a 32-byte description of itself and
// every rank compares the table, so all of them throw the same comm_error naming both calls. It
// costs a host round trip per collective (tests and debugging, not training).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include <mxkit/enum_names.hpp>
#include <mxkit/parallel/communicator.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// The collectives, by name (the messages of verify_calls and of the watchdog).
enum class nccl_collective : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };

}  // namespace gpu
template <>
struct enum_names<gpu::nccl_collective> {
  static constexpr const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  static constexpr gpu::nccl_collective last = gpu::nccl_collective::broadcast;
};
namespace gpu {

// One collective call.
struct nccl_call {
  nccl_collective what;
  nn::comm_type type;
  std::size_t count;  // per rank: in.count (all_reduce, all_gather, broadcast), out.count (reduce_scatter)
  int detail;         // reduce_op, or the broadcast's root
};

inline constexpr std::size_t nccl_call_descriptor_bytes = 32;  // sequence, kind|type|detail, count, spare (u64 each)
// Call number `seq` as every rank describes it to the others (verify_calls).
struct nccl_call_descriptor {
  std::uint64_t word[4];
};
static_assert(sizeof(nccl_call_descriptor) == nccl_call_descriptor_bytes);

inline nccl_call_descriptor describe(const nccl_call& c, std::uint64_t seq) {
  return {{seq, static_cast<std::uint64_t>(c.what) | (static_cast<std::uint64_t>(c.type) << 8) |
                    (static_cast<std::uint64_t>(static_cast<std::uint32_t>(c.detail)) << 16),
           static_cast<std::uint64_t>(c.count), 0}};
}

// The ranks' descriptors (`size` of them, rank order) compared with rank 0's: the message naming
// rank 0's call and the first other one, or nullopt when every rank called the same collective.
inline std::optional<std::string> nccl_call_mismatch(const std::uint64_t* all, int size) {
  auto describe = [&](int r_, const std::uint64_t* d) {
    std::ostringstream o;
    const auto what = static_cast<int>(d[1] & 0xff), type = static_cast<int>((d[1] >> 8) & 0xff);
    const auto detail = static_cast<std::int32_t>(static_cast<std::uint32_t>(d[1] >> 16));
    o << "rank " << r_ << " called #" << d[0] << " " << (what < 4 ? name_of(static_cast<nccl_collective>(what)) : "?") << " of " << d[2]
      << " " << (type <= static_cast<int>(nn::comm_type::u8) ? name_of(static_cast<nn::comm_type>(type)) : "?");
    if (what == static_cast<int>(nccl_collective::broadcast)) o << " from root " << detail;
    else if (what != static_cast<int>(nccl_collective::all_gather)) o << " (" << (detail == 1 ? "max" : "sum") << ")";
    return o.str();
  };
  for (int q = 1; q < size; ++q) {
    const std::uint64_t* d = all + 4 * q;
    if (d[0] != all[0] || d[1] != all[1] || d[2] != all[2]) return "mismatched collective: " + describe(0, all) + ", " + describe(q, d);
  }
  return std::nullopt;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
