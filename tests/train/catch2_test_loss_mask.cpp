// SPDX-License-Identifier: Apache-2.0
// The packed loss mask from the file to the loss: a packed dataset's batches carry it aligned with
// their targets (sample_batches, packed_samples::fill_mask), and the trainer and evaluate() apply
// it: a target the mask leaves out changes nothing in a training run, a mask of ones is no mask,
// and a mask with zeros trains otherwise.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include <mxkit/train/packed_dataset.hpp>
#include <mxkit/train/sample_batches.hpp>
#include <mxkit/train/training.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"
#include "token_files.hpp"

namespace loss_mask_test {
using namespace nn_test;

// Batch n: fixed pseudo-random tokens, each batch with the mask the source was given (empty: none);
// targets the mask leaves out replaced by `other` + n when other >= 0.
class masked_source : public batch_source {
 public:
  masked_source(batch_shape s, std::vector<std::int32_t> mask, std::int32_t other = -1) : s_(s), mask_(std::move(mask)), other_(other) {}
  batch at(std::uint64_t n) const override {
    batch b{s_, std::vector<std::int32_t>(s_.tokens()), std::vector<std::int32_t>(s_.tokens())};
    std::mt19937_64 gen(1000 + n);
    for (std::size_t i = 0; i < s_.tokens(); ++i) {
      b.inputs[i] = static_cast<std::int32_t>(gen() % 256);
      b.targets[i] = static_cast<std::int32_t>(gen() % 256);
      if (other_ >= 0 && !mask_.empty() && mask_[i] == 0) b.targets[i] = static_cast<std::int32_t>((other_ + n) % 256);
    }
    b.loss_mask = mask_;
    return b;
  }
  const batch_shape& shape() const noexcept override { return s_; }

 private:
  batch_shape s_;
  std::vector<std::int32_t> mask_;
  std::int32_t other_;
};

struct run_result {
  std::vector<double> losses;
  std::vector<std::vector<double>> weights;
  double eval = 0.0;
};

run_result train(std::shared_ptr<const batch_source> source) {
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 17);
  train_config c;
  c.steps = 3;
  c.shape = source->shape();
  c.schedule = {1e-2, 1e-3, 1, 3};
  trainer t(m, source, c);
  t.run();
  run_result r{t.losses(), {}, evaluate(m, {source->at(10), source->at(11)})};
  for (parameter* p : m.parameters()) r.weights.push_back(be.read(p->value));
  return r;
}


TEST_CASE("loss mask: a packed dataset's batches carry it, aligned with their targets", "[train][loss_mask]") {
  nn_test::temp_dir dir;
  const std::vector<std::int64_t> tokens = {1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24};  // (3, 5): samples of seq 4
  const std::vector<std::int64_t> mask = {1, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 0};
  nn_test::write_all(dir.path / "rows.npy", train_test::npy("<i4", {3, 5}, train_test::elements(tokens, 4)));
  nn_test::write_all(dir.path / "rows.loss_mask.npy", train_test::npy("|b1", {3, 5}, train_test::elements(mask, 1)));
  const auto d = std::make_shared<const packed_dataset>(dir.path / "rows.npy");
  const auto samples = std::make_shared<const packed_samples>(d, 0, 3, packed_sample_config{0, 0, false});
  CHECK(samples->has_loss_mask());
  const sample_batches source(samples, {1, 4});
  for (std::uint64_t n = 0; n < 3; ++n) {
    const batch b = source.at(n);
    REQUIRE(b.loss_mask.size() == 4);
    for (std::size_t t = 0; t < 4; ++t) {
      CHECK(b.targets[t] == tokens[n * 5 + t + 1]);
      CHECK(b.loss_mask[t] == mask[n * 5 + t + 1]);  // the mask of the target token (entry 0 predicts nothing)
    }
  }
  CHECK(sequential_sample_batches(*samples, {3, 4}, 1).front().loss_mask == std::vector<std::int32_t>{0, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0, 0});
  // Without the mask file: no mask, every target counts.
  std::filesystem::remove(dir.path / "rows.loss_mask.npy");
  const auto plain = std::make_shared<const packed_samples>(std::make_shared<const packed_dataset>(dir.path / "rows.npy"), 0, 3,
                                                            packed_sample_config{0, 0, false});
  CHECK_FALSE(plain->has_loss_mask());
  CHECK(sample_batches(plain, {1, 4}).at(0).loss_mask.empty());
}

TEST_CASE("loss mask: the trainer and evaluate() apply it", "[train][loss_mask]") {
  const batch_shape s{2, 16};
  std::vector<std::int32_t> mask(s.tokens(), 1), ones(s.tokens(), 1);
  for (std::size_t i = 0; i < mask.size(); i += 3) mask[i] = 0;
  const run_result masked = train(std::make_shared<masked_source>(s, mask));
  // Targets the mask leaves out, replaced: the same run, bit for bit (losses, weights, evaluation).
  const run_result other = train(std::make_shared<masked_source>(s, mask, 7));
  CHECK(other.losses == masked.losses);
  CHECK(other.weights == masked.weights);
  CHECK(other.eval == masked.eval);
  // A mask of ones is no mask.
  const run_result all = train(std::make_shared<masked_source>(s, ones)), none = train(std::make_shared<masked_source>(s, std::vector<std::int32_t>{}));
  CHECK(all.losses == none.losses);
  CHECK(all.weights == none.weights);
  CHECK(all.eval == none.eval);
  // And a mask with zeros is applied: another loss from the first step on.
  REQUIRE(masked.losses.size() == 3);
  CHECK(masked.losses[0] != none.losses[0]);
  CHECK(masked.eval != none.eval);
}

}  // namespace loss_mask_test
