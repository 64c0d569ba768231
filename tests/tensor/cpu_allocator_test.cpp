// The CPU allocator's memory cap (set_cpu_memory_limit, KILN_CPU_MEMORY_LIMIT),
// its byte counts, and its cache of large blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <unistd.h>

#include "tensor/allocator.h"
#include "tensor/ops.h"
#include "test_util.h"

namespace kiln {
namespace {

// Restores the limit a test changed, whatever it throws.
struct LimitGuard {
  size_t previous = cpu_memory_limit();
  ~LimitGuard() { set_cpu_memory_limit(previous); }
};

TEST(CpuAllocator, AnAllocationOverTheLimitThrowsAndLeavesTheCountAsItWas) {
  LimitGuard guard;
  size_t in_use = cpu_allocated_bytes();
  set_cpu_memory_limit(in_use + (size_t{1} << 20));
  Tensor fits = empty({1 << 17}, DType::Float32);  // 512 KiB
  size_t after_fit = cpu_allocated_bytes();
  EXPECT_EQ(after_fit, in_use + (size_t{1} << 19));
  try {
    Tensor too_big = empty({1 << 18}, DType::Float32);  // 1 MiB more
    FAIL() << "an allocation over the limit succeeded";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("CpuAllocator: out of memory: allocating 1048576 bytes with " +
                           std::to_string(after_fit) + " in use would exceed this process's limit of " +
                           std::to_string(in_use + (size_t{1} << 20)) + " bytes"),
              std::string::npos)
        << message;
  }
  EXPECT_EQ(cpu_allocated_bytes(), after_fit);
  // Memory freed below the limit can be allocated again.
  fits = Tensor();
  Tensor again = empty({1 << 18}, DType::Float32);
  EXPECT_EQ(again.numel(), 1 << 18);
}

TEST(CpuAllocator, ZeroMeansNoLimit) {
  LimitGuard guard;
  set_cpu_memory_limit(0);
  Tensor big = zeros({1 << 22}, DType::Float32);  // 16 MiB
  EXPECT_EQ(big.numel(), 1 << 22);
  EXPECT_EQ(cpu_memory_limit(), 0u);
}

// A working set larger than the cache's floor (1 GiB), freed, is kept whole
// and handed back block for block: the cache may hold what the process had
// in use at once (Note [CPU allocator]). Untouched blocks: no memory is
// faulted in.
TEST(CpuAllocator, AWorkingSetAboveAGibibyteIsCachedWhole) {
  cpu_empty_cache();
  constexpr size_t kBlock = size_t{128} << 20, kBlocks = 12;  // 1.5 GiB
  Allocator& allocator = cpu_allocator();
  std::vector<void*> first;
  for (size_t i = 0; i < kBlocks; ++i) first.push_back(allocator.allocate(kBlock, kCPU));
  for (void* p : first) allocator.deallocate(p, kBlock, kCPU);
  EXPECT_EQ(cpu_cached_bytes(), kBlocks * kBlock);
  std::vector<void*> second;
  for (size_t i = 0; i < kBlocks; ++i) second.push_back(allocator.allocate(kBlock, kCPU));
  EXPECT_EQ(cpu_cached_bytes(), 0u);
  std::sort(first.begin(), first.end());
  std::vector<void*> sorted = second;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, first);  // the same blocks, none new
  for (void* p : second) allocator.deallocate(p, kBlock, kCPU);
  cpu_empty_cache();
  EXPECT_EQ(cpu_cached_bytes(), 0u);
}

// Runs this test binary again with KILN_CPU_MEMORY_LIMIT=`value` and only the
// test `child`, which checks what the allocator made of it; returns its
// exit status.
int run_child(const std::string& value, const std::string& child) {
  std::string command = "KILN_CPU_MEMORY_LIMIT='" + value + "' KILN_ALLOCATOR_TEST_CHILD=1 /proc/" +
                        std::to_string(getpid()) + "/exe --gtest_filter=CpuAllocator." + child + " >/dev/null 2>&1";
  return std::system(command.c_str());
}

bool in_child() { return std::getenv("KILN_ALLOCATOR_TEST_CHILD") != nullptr; }

TEST(CpuAllocator, TheLimitComesFromTheEnvironment) {
  if (in_child()) GTEST_SKIP() << "runs only the children";
  EXPECT_EQ(run_child("3M", "ChildSeesThreeMebibytes"), 0);
  EXPECT_EQ(run_child("3145728", "ChildSeesThreeMebibytes"), 0);
  EXPECT_EQ(run_child("12X", "ChildRefusesAMalformedLimit"), 0);
}

TEST(CpuAllocator, ChildSeesThreeMebibytes) {
  if (!in_child()) GTEST_SKIP() << "run by TheLimitComesFromTheEnvironment";
  EXPECT_EQ(cpu_memory_limit(), size_t{3} << 20);
  EXPECT_THROW(empty({1 << 20}, DType::Float32), Error);  // 4 MiB
}

TEST(CpuAllocator, ChildRefusesAMalformedLimit) {
  if (!in_child()) GTEST_SKIP() << "run by TheLimitComesFromTheEnvironment";
  expect_error([] { return cpu_memory_limit(); },
               "KILN_CPU_MEMORY_LIMIT: expected a number of bytes with an optional K, M or G suffix, got '12X'");
}

}  // namespace
}  // namespace kiln
