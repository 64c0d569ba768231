// The process-group backends by name (distributed/backend_registry.h).
#include "distributed/backend_registry.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "distributed/init.h"
#include "store_test_util.h"

namespace kiln::distributed {
namespace {

using testing::error_of;

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(BackendRegistry, ListsTheBackendsThisBuildHasGlooFirst) {
  const std::vector<std::string> names = available_backends();
#ifdef KILN_WITH_GLOO
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "gloo");
#endif
#ifdef KILN_WITH_NCCL
  EXPECT_TRUE(has(names, "nccl"));
#else
  EXPECT_FALSE(has(names, "nccl"));
#endif
#ifdef KILN_WITH_MPI
  EXPECT_TRUE(has(names, "mpi"));
#else
  EXPECT_FALSE(has(names, "mpi"));
#endif
}

TEST(BackendRegistry, ABackendRegisteredByAProgramIsUsedByName) {
  // A group that only says who it is: enough to see which factory ran.
  int made = 0;
  register_process_group_backend(
      "registry-test", {[&made](std::shared_ptr<Store>, int, int, ProcessGroupOptions) -> std::shared_ptr<ProcessGroup> {
                          ++made;
                          return nullptr;
                        },
                        {}});
  EXPECT_TRUE(has(available_backends(), "registry-test"));
  EXPECT_EQ(make_process_group("registry-test", nullptr, 1, 0, {}), nullptr);
  EXPECT_EQ(made, 1);
  EXPECT_NE(error_of([] { register_process_group_backend("registry-test", {[](auto, int, int, auto) {
                                                                              return std::shared_ptr<ProcessGroup>();
                                                                            },
                                                                            {}}); })
                .find("register_process_group_backend: 'registry-test' is registered twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { register_process_group_backend("no-create", {}); })
                .find("register_process_group_backend('no-create'): no create function"),
            std::string::npos);
}

TEST(BackendRegistry, AnUnknownNameListsWhatThereIs) {
  EXPECT_NE(error_of([] { process_group_backend("smoke-signals", "my_op"); })
                .find("my_op: backend 'smoke-signals' is not available in this build; it has ["),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::distributed
