// SPDX-License-Identifier: Apache-2.0
#pragma once
// A Hugging Face checkpoint (io/hf_sharded.hpp: an index and its shards, or one safetensors file)
// read parameter by parameter while a model is being built, for a base that is never whole in
// memory: nn/lora_base.hpp's build_lora_base creates, fills, quantizes and releases one layer at
// a time (lora_base_config::load), so import_hf_checkpoint, which writes into a built model,
// cannot serve it.
//
// The checks are import_hf_checkpoint's, and done where it does them: the constructor opens the
// catalog (the index and every shard's header: open_hf_checkpoint) and checks it against the
// configuration (check_hf_catalog: every tensor present with its shape, no other tensor, F32 or
// BF16, the "mxkit.*" metadata), so a bad checkpoint is refused, naming the file and the tensor,
// before the first parameter is allocated. fill() then reads the tensors that make up one
// parameter (the fused QKV and gate/up take three and two: io/hf_llama.hpp) with the import's
// per-tensor read (read_hf_elements: a seek and at most chunk_elements at a time), so host memory
// holds one chunk and the headers. The last shard read stays open: the model's order (embedding,
// layers, final norm, head) is export_hf_sharded's, which walks the shards one after the other.
// finish() checks that every tensor of the checkpoint was read exactly once.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <mxkit/config.hpp>
#include <mxkit/io/hf_sharded.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class hf_streamed_import {
 public:
  // Throws safetensors_error naming the file and the tensor (see the top of the file).
  hf_streamed_import(const std::filesystem::path& path, const model_config& c, std::size_t chunk_elements = std::size_t{1} << 20)
      : catalog_(open_hf_checkpoint(path)), layout_(check_hf_catalog(catalog_, c)), chunk_(chunk_elements) {
    detail::require(chunk_elements > 0, "hf_streamed_import: chunk_elements must be positive");
    for (const hf_llama_tensor& t : layout_) of_param_[t.param].push_back(&t);
    stats_.tensors = catalog_.tensors.size();
    stats_.shards = catalog_.shard_paths.size();
    stats_.bytes = catalog_.bytes;
  }
  hf_streamed_import(const hf_streamed_import&) = delete;  // (of_param_ points into layout_)
  hf_streamed_import& operator=(const hf_streamed_import&) = delete;

  // Writes every element of `p` (its master, whole in this process) from the checkpoint's tensors
  // of it, once. Throws safetensors_error for a parameter the layout has no tensor of (an adapter),
  // one of another shape, or one filled twice.
  void fill(backend& be, parameter& p) {
    const auto it = of_param_.find(p.name);
    if (it == of_param_.end())
      throw safetensors_error(catalog_.what + ": parameter '" + p.name + "' has no tensor in a Llama checkpoint");
    std::size_t elements = 0;
    for (const hf_llama_tensor* t : it->second) elements += t->rows * t->cols;
    if (!p.value.defined() || p.cols() != it->second.front()->cols || p.value.size() != elements)
      throw safetensors_error(catalog_.what + ": parameter '" + p.name + "' is " + std::to_string(p.rows()) + "x" + std::to_string(p.cols()) +
                              (p.value.defined() ? "" : " without memory") + ", its tensors hold " + std::to_string(elements) + " elements of " +
                              std::to_string(it->second.front()->cols) + " columns");
    const tensor whole = view_of(p.value, 0, 1, p.value.size());
    for (const hf_llama_tensor* t : it->second) {
      if (!read_.insert(t->name).second) throw safetensors_error(catalog_.what + ": tensor '" + t->name + "' read twice");
      const hf_catalog::place& at = catalog_.tensors.at(t->name);
      const std::string shard = catalog_.what + ": shard '" + catalog_.shard_names[at.shard] + "': ";
      try {
        if (!open_ || open_shard_ != at.shard) {
          open_.reset();
          open_.emplace(catalog_.shard_paths[at.shard]);
          open_shard_ = at.shard;
        }
        const std::size_t n = t->rows * t->cols;
        stats_.bytes_read += read_hf_elements(be, *open_, catalog_.headers[at.shard], *at.entry, 0, n, view_of(whole, t->row0 * t->cols, 1, n),
                                              chunk_, raw_, values_);
      } catch (const safetensors_error& e) {
        throw safetensors_error(shard + e.what());
      } catch (const std::system_error& e) {
        throw safetensors_error(shard + e.what());
      }
    }
    ++p.version;  // every quantized copy is stale now
  }

  // After the build: every tensor of the checkpoint was read (else the model built is not the
  // checkpoint's). Closes the last shard. Throws safetensors_error naming the first one left.
  hf_import_stats finish() {
    open_.reset();
    for (const auto& [name, place] : catalog_.tensors)
      if (!read_.count(name)) throw safetensors_error(catalog_.what + ": tensor '" + name + "'" + catalog_.where(name) + " was never read");
    return stats_;
  }

  const hf_catalog& catalog() const noexcept { return catalog_; }

 private:
  hf_catalog catalog_;
  std::vector<hf_llama_tensor> layout_;  // (its pointers are into layout_, which never changes after the constructor)
  std::map<std::string, std::vector<const hf_llama_tensor*>> of_param_;  // mxkit parameter -> its tensors, by row
  std::size_t chunk_;
  std::set<std::string> read_;
  std::optional<detail::input_file> open_;
  std::size_t open_shard_ = 0;
  std::vector<std::uint8_t> raw_;
  std::vector<double> values_;
  hf_import_stats stats_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
