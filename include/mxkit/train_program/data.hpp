// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training program's data (--data, --eval-data, --vocab): what each path holds, told from the
// files' content (mxkit/train/dataset_format.hpp), loaded and checked before the first step, and
// turned into the trainer's batch source and the evaluation batches.
//   text       bytes, vocabulary 256 (train/data.hpp): random windows for training; without
//              --eval-data the last 10% of the file is held out (consecutive windows)
//   megatron   a Megatron indexed dataset by prefix, .idx or .bin (mxkit/train/indexed_dataset.hpp):
//              samples built by Megatron's rule (mxkit/train/gpt_samples.hpp) for the whole run,
//              steps x global batch samples, seeded by --seed + 1; without --eval-data the last
//              10% of the documents are held out (at least one; Megatron's splits are contiguous
//              document ranges too), evaluated in file order
//   packed     an .npy array [rows, seq + 1] with an optional loss mask beside it
//              (mxkit/train/packed_dataset.hpp): rows in NeMo's per-epoch seeded order; without
//              --eval-data the last 10% of the rows are held out. The loss (training and
//              evaluation) is each batch's mean over the targets the mask counts.
// The default --vocab is the data's largest token + 1 (the training and the held-out parts), 256
// for text; a token >= --vocab is refused, naming it. Every refusal of a token file (its reader's
// message names the file and the field) is a usage error: exit 2 before the first step.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/config.hpp>
#include <mxkit/io/checkpoint.hpp>
#include <mxkit/train/data.hpp>
#include <mxkit/train/dataset_format.hpp>
#include <mxkit/train/gpt_samples.hpp>
#include <mxkit/train/indexed_dataset.hpp>
#include <mxkit/train/mapped_file.hpp>
#include <mxkit/train/packed_dataset.hpp>
#include <mxkit/train/sample_batches.hpp>

#include <mxkit/train_program/files.hpp>
#include <mxkit/train_program/options.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

// One part of the data: what the run trains on, or what it evaluates on.
struct data_part {
  nn::dataset_kind kind = nn::dataset_kind::text;
  nn::token_buffer bytes;                                // text
  std::shared_ptr<const nn::indexed_dataset> megatron;  // megatron: documents [first, last)
  std::shared_ptr<const nn::packed_dataset> packed;     // packed: rows [first, last)
  std::uint64_t first = 0, last = 0;
  std::uint64_t tokens = 0;
  bool empty() const noexcept { return tokens == 0; }
};

struct training_data {
  std::string description;
  nn::dataset_kind kind = nn::dataset_kind::text;
  data_part train, eval;
  std::size_t vocab = 256;     // --vocab, or the data's largest token + 1
  std::uint64_t bytes = 0;     // of the files read (text: the bytes of both parts)
  std::uint64_t checksum = 0;  // FNV-1a 64 of those bytes: the data's identity
  bool loss_mask = false;      // a packed loss mask was read: the loss counts the targets it marks
};

// The files a path stands for (for files.hpp's checks: no output may be one of them).
inline std::vector<flagged_path> dataset_files(const char* flag, const fs::path& path) {
  nn::dataset_location where;
  try {
    where = nn::detect_dataset(path, flag);
  } catch (const std::invalid_argument&) {
    return {{flag, path}};  // (load_data says why)
  }
  switch (where.kind) {
    case nn::dataset_kind::megatron:
      return {{flag, nn::indexed_dataset::index_path(where.path)}, {flag, nn::indexed_dataset::data_path(where.path)}};
    case nn::dataset_kind::packed:
      return {{flag, path}, {flag, nn::packed_dataset::default_mask_path(path)}};
    case nn::dataset_kind::text: break;
  }
  return {{flag, path}};
}

namespace data_detail {

inline std::uint64_t file_checksum(const fs::path& p, std::uint64_t h, std::uint64_t& bytes) {
  if (!fs::exists(p)) return h;
  const nn::mapped_file f(p, "data file");
  bytes += f.size();
  return nn::checkpoint_io::fnv1a64(reinterpret_cast<const std::uint8_t*>(f.bytes().data()), f.size(), h);
}

// The last tenth of n units held out, at least one when there are two or more.
inline std::uint64_t held_out(std::uint64_t n) { return n < 2 ? 0 : std::max<std::uint64_t>(1, n / 10); }

// Units (documents or rows) [0, cut) to `whole`, [cut, n) to `held`: the held-out tenth when
// split, nothing held out otherwise. Returns cut.
inline std::uint64_t split_units(std::uint64_t n, bool split, data_part& whole, data_part& held) {
  const std::uint64_t cut = n - (split ? held_out(n) : 0);
  whole.first = 0;
  whole.last = held.first = cut;
  held.last = n;
  return cut;
}

// A token file, opened and split: [0, n - held) for training, the rest held out (split = false:
// everything in `whole`).
inline void open_tokens(const char* flag, const nn::dataset_location& where, bool split, data_part& whole, data_part& held,
                        std::int64_t& max_token) {
  whole.kind = held.kind = where.kind;
  if (where.kind == nn::dataset_kind::megatron) {
    auto d = std::make_shared<const nn::indexed_dataset>(where.path);
    const std::uint64_t cut = split_units(d->documents(), split, whole, held);
    whole.megatron = held.megatron = d;
    whole.tokens = held.tokens = 0;
    const std::uint64_t held_from = d->first_sequence(cut);
    for (std::uint64_t s = 0; s < d->sequences(); ++s) (s < held_from ? whole.tokens : held.tokens) += d->length(s);
    max_token = std::max(max_token, d->max_token());
    if (whole.tokens == 0) throw usage_error(std::string(flag) + " '" + where.path.string() + "' holds no tokens" + (split ? " outside its held-out tenth" : ""));
  } else {
    auto d = std::make_shared<const nn::packed_dataset>(where.path);
    const std::uint64_t cut = split_units(d->rows(), split, whole, held);
    whole.packed = held.packed = d;
    whole.tokens = cut * d->row_length();
    held.tokens = (d->rows() - cut) * d->row_length();
    max_token = std::max(max_token, d->max_token());
  }
}

}  // namespace data_detail

// Reads --data (or the default corpora, `default_dir`) and --eval-data as the options say.
inline training_data load_data(const options& o, const std::optional<fs::path>& default_dir) {
  using data_detail::open_tokens;
  training_data d;
  std::int64_t max_token = -1;
  const bool held_out = o.eval_data.empty();
  nn::dataset_location train_at{nn::dataset_kind::text, o.data}, eval_at{};
  try {  // (a path that names nothing, or a token file's name without its content: usage errors)
    if (!o.data.empty()) train_at = nn::detect_dataset(o.data, "--data");
    if (!held_out) eval_at = nn::detect_dataset(o.eval_data, "--eval-data");
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  const bool text = train_at.kind == nn::dataset_kind::text;
  if (!held_out && text != (eval_at.kind == nn::dataset_kind::text))
    throw usage_error(std::string("--data is ") + nn::dataset_kind_name(train_at.kind) + " but --eval-data '" + o.eval_data.string() + "' is " +
                      nn::dataset_kind_name(eval_at.kind) + ": bytes and tokens are different vocabularies");
  d.kind = train_at.kind;
  if (text) {
    // Each text file split 90/10 (the default corpora each apart, so that the held-out tail has
    // text of both); with --eval-data the parts are joined again and --eval-data is held out.
    std::vector<fs::path> files;
    if (o.data.empty()) files = {*default_dir / "stories.txt", *default_dir / "qa.txt"};
    else files = {o.data};
    d.description = o.data.empty() ? (*default_dir / "stories.txt").string() + " + qa.txt" : o.data.string();
    std::vector<std::uint8_t> train, validation;
    for (const fs::path& f : files) {
      const nn::corpus_split s = nn::load_corpus(f, 0.1);
      train.insert(train.end(), s.train->begin(), s.train->end());
      (held_out ? validation : train).insert(held_out ? validation.end() : train.end(), s.validation->begin(), s.validation->end());
    }
    if (!held_out) {
      const nn::corpus_split s = nn::load_corpus(o.eval_data, 0.1);
      validation.assign(s.train->begin(), s.train->end());
      validation.insert(validation.end(), s.validation->begin(), s.validation->end());
      d.description += ", evaluated on " + o.eval_data.string();
    }
    d.checksum = nn::checkpoint_io::fnv1a64(validation.data(), validation.size(), nn::checkpoint_io::fnv1a64(train.data(), train.size()));
    d.bytes = train.size() + validation.size();
    for (const auto* part : {&train, &validation})
      for (std::uint8_t b : *part) max_token = std::max<std::int64_t>(max_token, b);
    d.train.tokens = train.size();
    d.eval.tokens = validation.size();
    d.train.bytes = std::make_shared<const std::vector<std::uint8_t>>(std::move(train));
    d.eval.bytes = std::make_shared<const std::vector<std::uint8_t>>(std::move(validation));
  } else {
    // A token file's reader refuses it with a message naming the file and the field: a usage error.
    try {
      data_part unused;
      open_tokens("--data", train_at, held_out, d.train, held_out ? d.eval : unused, max_token);
      if (!held_out) open_tokens("--eval-data", eval_at, false, d.eval, unused, max_token);
      for (const nn::dataset_location* at : {&train_at, &eval_at}) {
        if (at->path.empty()) continue;
        if (at->kind == nn::dataset_kind::megatron) {
          d.checksum = data_detail::file_checksum(nn::indexed_dataset::index_path(at->path), d.checksum, d.bytes);
          d.checksum = data_detail::file_checksum(nn::indexed_dataset::data_path(at->path), d.checksum, d.bytes);
        } else {
          d.checksum = data_detail::file_checksum(at->path, d.checksum, d.bytes);
          d.checksum = data_detail::file_checksum(nn::packed_dataset::default_mask_path(at->path), d.checksum, d.bytes);
        }
      }
    } catch (const std::invalid_argument& e) {
      if (dynamic_cast<const usage_error*>(&e)) throw;
      throw usage_error(e.what());
    }
    d.description = train_at.path.string() + " (" + nn::dataset_kind_name(train_at.kind) + ")";
    if (!held_out) d.description += ", evaluated on " + eval_at.path.string() + " (" + nn::dataset_kind_name(eval_at.kind) + ")";
    d.loss_mask = (d.train.packed && d.train.packed->has_mask()) || (d.eval.packed && d.eval.packed->has_mask());
    // A packed row is one sample: seq + 1 tokens.
    for (const data_part* p : {&d.train, &d.eval})
      if (p->packed && p->packed->row_length() != o.seq + 1)
        throw usage_error(std::string(p == &d.train ? "--data" : "--eval-data") + " '" + p->packed->tokens_file().path().string() + "': its rows are " +
                          std::to_string(p->packed->row_length()) + " tokens, one sample each, so --seq must be " +
                          std::to_string(p->packed->row_length() - 1) + " (got --seq " + std::to_string(o.seq) + ")");
  }
  // The vocabulary: --vocab, which every token must be below, or the largest token + 1.
  const std::size_t data_vocab = text ? 256 : static_cast<std::size_t>(max_token + 1);
  d.vocab = o.vocab.value_or(data_vocab);
  if (max_token >= 0 && static_cast<std::uint64_t>(max_token) >= d.vocab)
    throw usage_error("--vocab " + std::to_string(d.vocab) + ": the data holds token " + std::to_string(max_token) +
                      " (its largest), outside the vocabulary [0, " + std::to_string(d.vocab) + "); give --vocab " +
                      std::to_string(max_token + 1) + " or more, or leave --vocab out");
  return d;
}

// The seed of the token datasets' shuffles: --seed + 1, within numpy RandomState's [0, 2^32).
inline std::uint64_t token_data_seed(const options& o) {
  if (o.seed >= 0xFFFFFFFFull)
    throw usage_error("--seed " + std::to_string(o.seed) + ": a token dataset is shuffled with seed --seed + 1, which must be below 2^32 "
                      "(numpy.random.RandomState's seeds, whose orders Megatron's and NeMo's datasets use)");
  return o.seed + 1;
}

// The trainer's batches: `samples` is what the run reads (steps x ranks x micro-batches x batch).
inline std::shared_ptr<const nn::batch_source> training_batches(const training_data& d, const options& o, std::uint64_t samples) {
  const nn::batch_shape shape{o.batch, o.seq};
  const data_part& p = d.train;
  switch (p.kind) {
    case nn::dataset_kind::text: return std::make_shared<const nn::batch_loader>(p.bytes, shape, o.seed + 1);
    case nn::dataset_kind::megatron: {
      auto s = std::make_shared<const nn::gpt_samples>(p.megatron, p.first, p.last, nn::gpt_sample_config{o.seq, samples, token_data_seed(o), true});
      return std::make_shared<const nn::sample_batches>(std::move(s), shape);
    }
    case nn::dataset_kind::packed: {
      auto s = std::make_shared<const nn::packed_samples>(p.packed, p.first, p.last, nn::packed_sample_config{samples, token_data_seed(o), true});
      return std::make_shared<const nn::sample_batches>(std::move(s), shape);
    }
  }
  return nullptr;
}

// Up to --eval-batches batches of the held-out part, in order (none without evaluations).
inline std::vector<nn::batch> evaluation_batches(const training_data& d, const options& o) {
  if (o.eval_every == 0) return {};
  const nn::batch_shape shape{o.batch, o.seq};
  const data_part& p = d.eval;
  const std::string flag = o.eval_data.empty() ? "--data: the held-out part" : "--eval-data";
  const std::string fix = "; use a larger file, a smaller --batch" + std::string(p.kind == nn::dataset_kind::packed ? "" : " or --seq") +
                          ", or --eval-every 0";
  if (p.kind == nn::dataset_kind::text) {
    if (p.bytes->size() <= shape.tokens())
      throw usage_error(flag + " (" + std::to_string(p.bytes->size()) + " bytes) cannot fill one evaluation batch of " + std::to_string(o.batch) +
                        " x " + std::to_string(o.seq) + " tokens" + fix);
    return nn::sequential_batches(p.bytes, shape, o.eval_batches);
  }
  if (p.first == p.last) throw usage_error(flag + " is empty: the data has a single " +
                                           (p.kind == nn::dataset_kind::packed ? "row" : "document") + ", so nothing is held out; give --eval-data" + fix);
  std::shared_ptr<const nn::token_samples> s;
  try {
    if (p.kind == nn::dataset_kind::megatron) s = std::make_shared<const nn::gpt_samples>(p.megatron, p.first, p.last, nn::gpt_sample_config{o.seq, 0, 0, false});
    else s = std::make_shared<const nn::packed_samples>(p.packed, p.first, p.last, nn::packed_sample_config{0, 0, false});
  } catch (const std::invalid_argument& e) {
    throw usage_error(flag + " (" + std::to_string(p.tokens) + " tokens) cannot fill one evaluation sample of --seq + 1 = " +
                      std::to_string(o.seq + 1) + " tokens" + fix + " (" + e.what() + ")");
  }
  if (s->size() < o.batch)
    throw usage_error(flag + " has " + std::to_string(s->size()) + " samples of " + std::to_string(o.seq + 1) + " tokens, fewer than one evaluation batch of " +
                      std::to_string(o.batch) + fix);
  return nn::sequential_sample_batches(*s, shape, o.eval_batches);
}

}  // namespace train_program
MXKIT_END_NAMESPACE
