// Samplers: permutations, per-epoch reseeding, and DistributedSampler's
// padding / truncation / subsampling against hand-computed lists and torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "tensor/error.h"

using kiln::data::DistributedSampler;
using kiln::data::RandomSampler;
using kiln::data::SequentialSampler;
using kiln::data::random_permutation;
using Indices = std::vector<int64_t>;

namespace {

Indices iota(int64_t n) {
  Indices v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

bool is_permutation_of_range(Indices v) {
  std::sort(v.begin(), v.end());
  return v == iota(static_cast<int64_t>(v.size()));
}

template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.message();
  }
  return "<no error>";
}

}  // namespace

TEST(RandomPermutation, IsAPermutationDeterministicInTheSeed) {
  for (int64_t n : {0, 1, 2, 7, 100}) {
    Indices p = random_permutation(n, 42);
    EXPECT_EQ(p.size(), static_cast<size_t>(n));
    EXPECT_TRUE(is_permutation_of_range(p)) << "n=" << n;
    EXPECT_EQ(p, random_permutation(n, 42)) << "n=" << n;
  }
  EXPECT_NE(random_permutation(100, 1), random_permutation(100, 2));
  EXPECT_NE(random_permutation(100, 1), iota(100));
}

TEST(RandomPermutation, EveryOrderOfThreeIsAboutEquallyLikely) {
  // 6 orders of 3 elements over 6000 seeds: each expected 1000 times; a
  // biased shuffle (e.g. swapping with any position) would be far off.
  std::vector<Indices> orders;
  std::vector<int> counts(6, 0);
  Indices base = {0, 1, 2};
  do orders.push_back(base);
  while (std::next_permutation(base.begin(), base.end()));
  for (uint64_t seed = 0; seed < 6000; ++seed) {
    Indices p = random_permutation(3, seed);
    counts[static_cast<size_t>(std::find(orders.begin(), orders.end(), p) - orders.begin())]++;
  }
  for (int c : counts) {
    EXPECT_GT(c, 880);
    EXPECT_LT(c, 1120);
  }
}

TEST(SequentialSampler, YieldsTheRangeEveryEpoch) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(), iota(5));
  s.set_epoch(3);
  EXPECT_EQ(s.indices(), iota(5));
  EXPECT_EQ(error_message([] { SequentialSampler(-1); }), "SequentialSampler: size must be >= 0, got -1");
}

TEST(RandomSampler, SeededPerEpoch) {
  RandomSampler a(50, 7), b(50, 7);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_TRUE(is_permutation_of_range(a.indices()));
  Indices epoch0 = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), epoch0);
  EXPECT_EQ(a.indices(), random_permutation(50, 8));  // seed + epoch
  EXPECT_EQ(a.indices(), a.indices());                // a function of the epoch, not of the call count
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), epoch0);
}

TEST(DistributedSampler, PadsFromTheHeadAndSubsamples) {
  // 10 examples, 4 replicas: total_size 12, order 0..9 then 0, 1.
  const std::vector<Indices> expected = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int64_t rank = 0; rank < 4; ++rank) {
    DistributedSampler s(10, 4, rank, /*shuffle=*/false);
    EXPECT_EQ(s.size(), 3);
    EXPECT_EQ(s.total_size(), 12);
    EXPECT_EQ(s.indices(), expected[static_cast<size_t>(rank)]) << "rank " << rank;
  }
}

TEST(DistributedSampler, PaddingLongerThanTheDatasetCycles) {
  // 2 examples, 5 replicas: total_size 5, order 0, 1, 0, 1, 0.
  const Indices expected = {0, 1, 0, 1, 0};
  for (int64_t rank = 0; rank < 5; ++rank) {
    DistributedSampler s(2, 5, rank, false);
    EXPECT_EQ(s.indices(), Indices{expected[static_cast<size_t>(rank)]});
  }
}

TEST(DistributedSampler, DropLastTruncates) {
  // 10 examples, 4 replicas, drop_last: 2 per rank, order 0..7.
  const std::vector<Indices> expected = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  for (int64_t rank = 0; rank < 4; ++rank) {
    DistributedSampler s(10, 4, rank, false, 0, /*drop_last=*/true);
    EXPECT_EQ(s.size(), 2);
    EXPECT_EQ(s.indices(), expected[static_cast<size_t>(rank)]);
  }
  // Divisible sizes lose nothing; fewer examples than replicas leaves none.
  EXPECT_EQ(DistributedSampler(8, 4, 1, false, 0, true).indices(), (Indices{1, 5}));
  EXPECT_EQ(DistributedSampler(3, 4, 0, false, 0, true).size(), 0);
  EXPECT_TRUE(DistributedSampler(3, 4, 0, false, 0, true).indices().empty());
}

TEST(DistributedSampler, ShuffledRanksPartitionOnePermutation) {
  // 11 examples, 3 replicas, epoch 2: the ranks interleave
  // random_permutation(11, seed + epoch) padded with its head.
  Indices order = random_permutation(11, 5 + 2);
  order.push_back(order[0]);
  Indices seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DistributedSampler s(11, 3, rank, true, /*seed=*/5);
    s.set_epoch(2);
    Indices mine = s.indices();
    ASSERT_EQ(mine.size(), 4u);
    for (size_t k = 0; k < mine.size(); ++k) EXPECT_EQ(mine[k], order[static_cast<size_t>(rank) + 3 * k]);
    seen.insert(seen.end(), mine.begin(), mine.end());
    s.set_epoch(3);
    EXPECT_NE(s.indices(), mine);
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(seen, iota(11));
}

TEST(DistributedSampler, RejectsBadRankAndReplicas) {
  EXPECT_EQ(error_message([] { DistributedSampler(10, 4, 4); }),
            "DistributedSampler: invalid rank 4, rank should be in the interval [0, 3] for num_replicas 4");
  EXPECT_EQ(error_message([] { DistributedSampler(10, 4, -1); }),
            "DistributedSampler: invalid rank -1, rank should be in the interval [0, 3] for num_replicas 4");
  EXPECT_EQ(error_message([] { DistributedSampler(10, 0, 0); }),
            "DistributedSampler: num_replicas must be >= 1, got 0");
  EXPECT_EQ(error_message([] { DistributedSampler(-3, 2, 0); }),
            "DistributedSampler: dataset size must be >= 0, got -3");
}

namespace {

bool torch_available() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

}  // namespace

TEST(DistributedSamplerVsTorch, UnshuffledIndicesAgree) {
  if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (install python3-torch)";
  struct Case {
    int64_t size, replicas;
    bool drop_last;
  };
  const std::vector<Case> cases = {{10, 4, false}, {10, 4, true}, {2, 5, false},  {3, 4, true},
                                   {12, 3, false}, {12, 3, true}, {17, 8, false}, {1, 1, false}};
  std::ostringstream script;
  script << "from torch.utils.data import DistributedSampler\n";
  for (const Case& c : cases) {
    for (int64_t rank = 0; rank < c.replicas; ++rank) {
      script << "print(' '.join(str(i) for i in DistributedSampler(range(" << c.size << "), num_replicas="
             << c.replicas << ", rank=" << rank << ", shuffle=False, drop_last=" << (c.drop_last ? "True" : "False")
             << ")) + ' .')\n";
    }
  }
  const std::string path = ::testing::TempDir() + "kiln_distributed_sampler_test_" + std::to_string(getpid()) + ".py";
  std::ofstream(path) << script.str();
  FILE* pipe = popen(("/usr/bin/python3 " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::vector<std::string> lines;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) lines.emplace_back(buffer);
  ASSERT_EQ(pclose(pipe), 0) << (lines.empty() ? "" : lines.back());
  size_t at = 0;
  for (const Case& c : cases) {
    for (int64_t rank = 0; rank < c.replicas; ++rank, ++at) {
      ASSERT_LT(at, lines.size());
      std::istringstream in(lines[at]);
      Indices torch_indices;
      std::string word;
      while (in >> word && word != ".") torch_indices.push_back(std::stoll(word));
      EXPECT_EQ(DistributedSampler(c.size, c.replicas, rank, false, 0, c.drop_last).indices(), torch_indices)
          << "size " << c.size << " replicas " << c.replicas << " rank " << rank << " drop_last " << c.drop_last;
    }
  }
}
