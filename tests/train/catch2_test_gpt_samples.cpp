// SPDX-License-Identifier: Apache-2.0
// Samples of a Megatron dataset (mxkit/train/gpt_samples.hpp), their batches
// (mxkit/train/sample_batches.hpp) and the numpy-compatible shuffle (mxkit/train/seeded_shuffle.hpp):
// within an epoch every token is in exactly one sample, in the order the seed gives the documents.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include <mxkit/train/gpt_samples.hpp>
#include <mxkit/train/sample_batches.hpp>
#include <mxkit/train/seeded_shuffle.hpp>

#include "../catch.hpp"
#include "token_files.hpp"

using namespace mxkit::nn;
namespace fs = std::filesystem;

namespace {
template <class T>
std::vector<T> shuffled(std::uint64_t seed, std::size_t n) {
  std::vector<T> v(n);
  std::iota(v.begin(), v.end(), T{0});
  seeded_shuffle r(seed);
  r.shuffle(std::span<T>(v));
  return v;
}

// Sequences whose tokens say where they are: token = 1000 x sequence + offset + 1. Lengths vary,
// two are empty.
std::vector<std::vector<std::int64_t>> traced(std::size_t n) {
  std::vector<std::vector<std::int64_t>> s(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t len = i % 7 == 3 ? 0 : 1 + (i * 37) % 29;
    for (std::size_t t = 0; t < len; ++t) s[i].push_back(static_cast<std::int64_t>(1000 * i + t + 1));
  }
  return s;
}

std::vector<std::int32_t> sample(const gpt_samples& g, std::uint64_t k, bool stream) {
  std::vector<std::int32_t> out(g.window());
  if (stream) g.fill_stream_sample(k, out.data());
  else g.fill(k, out.data());
  return out;
}
}  // namespace

TEST_CASE("seeded shuffle: numpy.random.RandomState(seed).shuffle's permutations", "[train][gpt_samples]") {
  // Printed by numpy 1.24: RandomState(1234).shuffle(arange(10)), then arange(100000) from the
  // same state; RandomState(2^32 - 1) of arange(7); RandomState(0) of arange(3).
  seeded_shuffle r(1234);
  std::vector<int> a(10);
  std::iota(a.begin(), a.end(), 0);
  r.shuffle(std::span<int>(a));
  CHECK(a == std::vector<int>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3});
  std::vector<std::uint32_t> b(100000);
  std::iota(b.begin(), b.end(), 0u);
  r.shuffle(std::span<std::uint32_t>(b));
  CHECK(std::vector<std::uint32_t>(b.begin(), b.begin() + 8) == std::vector<std::uint32_t>{42845, 37986, 15679, 51884, 72274, 7660, 65586, 76716});
  CHECK(shuffled<int>(4294967295u, 7) == std::vector<int>{1, 5, 0, 6, 4, 2, 3});
  CHECK(shuffled<int>(0, 3) == std::vector<int>{2, 1, 0});
  CHECK_THROWS_WITH(seeded_shuffle(4294967296u), mxkit_test::contains("shuffle seed 4294967296 is outside [0, 2^32)"));
}

TEST_CASE("gpt samples: every token of an epoch in exactly one sample, in the seed's document order", "[train][gpt_samples]") {
  nn_test::temp_dir dir;
  const auto seqs = traced(40);
  train_test::megatron(seqs, 4, {0, 5, 5, 17, 40}).write(dir.path / "d");  // 4 documents, one empty
  const auto data = std::make_shared<const indexed_dataset>(dir.path / "d");

  for (const std::uint64_t first_doc : {0u, 2u}) {
    const std::uint64_t u0 = data->first_sequence(first_doc), units = 40 - u0;
    std::uint64_t T = 0;
    for (std::uint64_t u = u0; u < 40; ++u) T += seqs[u].size();
    for (const std::size_t seq : {1u, 7u, 64u}) {
      for (const std::uint64_t want : {0u, 5u, 200u}) {
        INFO("documents from " << first_doc << ", seq " << seq << ", samples " << want);
        const gpt_samples g(data, first_doc, 4, {seq, want, 99, true});
        // Epochs: the fewest that hold want x seq + 1 tokens (one without a count).
        const std::uint64_t E = g.epochs();
        CHECK(g.tokens_per_epoch() == T);
        if (want == 0) CHECK(E == 1);
        else CHECK((E * T >= want * seq + 1 && (E - 1) * T < want * seq + 1));
        CHECK(g.size() == (E * T - 1) / seq);
        CHECK(g.size() >= want);
        CHECK(g.window() == seq + 1);

        // The document index: each epoch a permutation of the units.
        const auto doc = g.document_index();
        REQUIRE(doc.size() == E * units);
        for (std::uint64_t e = 0; e < E; ++e) {
          std::vector<std::uint32_t> epoch(doc.begin() + static_cast<std::ptrdiff_t>(e * units), doc.begin() + static_cast<std::ptrdiff_t>((e + 1) * units));
          std::sort(epoch.begin(), epoch.end());
          for (std::uint64_t u = 0; u < units; ++u) CHECK(epoch[u] == u);
        }
        // The stream: the units' tokens in document-index order; stream sample k is S[k seq, k seq + seq].
        std::vector<std::int32_t> S;
        for (std::uint32_t u : doc)
          for (std::int64_t v : seqs[u0 + u]) S.push_back(static_cast<std::int32_t>(v));
        REQUIRE(S.size() == E * T);
        for (std::uint64_t k = 0; k < g.size(); ++k) {
          const auto s = sample(g, k, true);
          REQUIRE(std::equal(s.begin(), s.end(), S.begin() + static_cast<std::ptrdiff_t>(k * seq)));
        }
        // Within epoch 0 each token is in exactly one sample's first seq tokens (the tail that fills
        // no whole sample aside), and the extra token is the next sample's first.
        std::map<std::int32_t, int> seen;
        const std::uint64_t in_epoch0 = g.first_sample_at(T);
        for (std::uint64_t k = 0; k < std::min(in_epoch0, g.size()); ++k) {
          const auto s = sample(g, k, true);
          for (std::size_t t = 0; t < seq; ++t)
            if (k * seq + t < T) ++seen[s[t]];
          if (k + 1 < g.size()) CHECK(s[seq] == sample(g, k + 1, true)[0]);
        }
        for (const auto& [token, n] : seen) CHECK(n == 1);
        CHECK(seen.size() == std::min<std::uint64_t>(T, g.size() * seq));

        // The read order: a permutation that reads epoch after epoch.
        std::vector<std::uint64_t> order(g.size());
        for (std::uint64_t i = 0; i < g.size(); ++i) {
          order[i] = g.order(i);
          CHECK(sample(g, i, false) == sample(g, order[i], true));
          if (i > 0) CHECK(order[i] * seq / T >= order[i - 1] * seq / T);
        }
        std::sort(order.begin(), order.end());
        for (std::uint64_t i = 0; i < g.size(); ++i) REQUIRE(order[i] == i);
      }
    }
  }
}

TEST_CASE("gpt samples: the seed decides the order; unshuffled is file order", "[train][gpt_samples]") {
  nn_test::temp_dir dir;
  train_test::megatron(traced(30), 8).write(dir.path / "d");
  const auto data = std::make_shared<const indexed_dataset>(dir.path / "d");
  const gpt_samples a(data, 0, 30, {16, 100, 5, true}), b(data, 0, 30, {16, 100, 5, true}), c(data, 0, 30, {16, 100, 6, true});
  const gpt_samples plain(data, 0, 30, {16, 0, 0, false});
  std::vector<std::uint64_t> oa, ob, oc;
  for (std::uint64_t i = 0; i < 100; ++i) {
    oa.push_back(a.order(i));
    ob.push_back(b.order(i));
    oc.push_back(c.order(i));
  }
  CHECK(oa == ob);
  CHECK(oa != oc);
  CHECK(std::vector<std::uint32_t>(a.document_index().begin(), a.document_index().end()) !=
        std::vector<std::uint32_t>(c.document_index().begin(), c.document_index().end()));
  // With one epoch the orders are numpy's: the document index, then the shuffle index, from one
  // generator (Megatron's _build_document_index and _build_shuffle_index).
  const gpt_samples one(data, 0, 30, {16, 0, 5, true});
  REQUIRE(one.epochs() == 1);
  seeded_shuffle r(5);
  std::vector<std::uint32_t> docs(30);
  std::iota(docs.begin(), docs.end(), 0u);
  r.shuffle(std::span<std::uint32_t>(docs));
  CHECK(std::vector<std::uint32_t>(one.document_index().begin(), one.document_index().end()) == docs);
  std::vector<std::uint64_t> samples(one.size());
  std::iota(samples.begin(), samples.end(), std::uint64_t{0});
  r.shuffle(std::span<std::uint64_t>(samples));
  for (std::uint64_t i = 0; i < one.size(); ++i) CHECK(one.order(i) == samples[i]);
  // Unshuffled: the sequences in file order, the samples in order.
  for (std::uint32_t i = 0; i < 30; ++i) CHECK(plain.document_index()[i] == i);
  for (std::uint64_t i = 0; i < plain.size(); ++i) CHECK(plain.order(i) == i);
}

TEST_CASE("gpt samples: refusals", "[train][gpt_samples]") {
  nn_test::temp_dir dir;
  train_test::megatron({{1, 2, 3}, {}, {4}}, 4, {0, 1, 2, 3}).write(dir.path / "d");
  const auto data = std::make_shared<const indexed_dataset>(dir.path / "d");
  CHECK_THROWS_WITH(gpt_samples(data, 1, 2, {4, 0, 0, true}), mxkit_test::contains("documents [1, 2) hold no tokens"));
  CHECK_THROWS_WITH(gpt_samples(data, 0, 1, {4, 0, 0, true}), mxkit_test::contains("3 tokens cannot fill one sample of seq + 1 = 5 tokens"));
  CHECK_THROWS_WITH(gpt_samples(data, 0, 4, {4, 0, 0, true}), mxkit_test::contains("documents [0, 4) of 3"));
  CHECK_THROWS_WITH(gpt_samples(data, 0, 3, {4, 1, std::uint64_t{1} << 32, true}), mxkit_test::contains("outside [0, 2^32)"));
  // Many epochs of a short dataset are fine: 4 tokens, 10 samples of 3 + 1.
  const gpt_samples g(data, 0, 3, {3, 10, 1, true});
  CHECK(g.epochs() == 8);
  CHECK(g.size() == 10);
}

TEST_CASE("sample batches: batch n is samples n B .. n B + B - 1, inputs and targets shifted", "[train][gpt_samples]") {
  nn_test::temp_dir dir;
  train_test::megatron(traced(20), 4).write(dir.path / "d");
  const auto data = std::make_shared<const indexed_dataset>(dir.path / "d");
  const auto g = std::make_shared<const gpt_samples>(data, 0, 20, gpt_sample_config{8, 30, 3, true});
  const sample_batches batches(g, {3, 8});
  CHECK(batches.batches() == g->size() / 3);
  for (std::uint64_t n = 0; n < batches.batches(); ++n) {
    const batch b = batches.at(n);
    for (std::size_t r = 0; r < 3; ++r) {
      const auto s = sample(*g, n * 3 + r, false);
      for (std::size_t t = 0; t < 8; ++t) {
        CHECK(b.inputs[r * 8 + t] == s[t]);
        CHECK(b.targets[r * 8 + t] == s[t + 1]);
      }
    }
  }
  CHECK_THROWS_WITH(batches.at(batches.batches()), mxkit_test::contains("were built"));
  CHECK_THROWS_WITH(sample_batches(g, {3, 9}), mxkit_test::contains("samples of 9 tokens, but batches of --seq 9 need 10"));
  const std::vector<batch> eval = sequential_sample_batches(*g, {3, 8}, 2);
  REQUIRE(eval.size() == 2);
  CHECK(eval[1].inputs == batches.at(1).inputs);
}
