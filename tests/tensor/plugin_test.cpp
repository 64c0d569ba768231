// The optional backends' libraries (Note [Backends as plugins] in
// tensor/plugin.h): where libkiln looks for them, what it says when one is
// not there, and, in a CUDA build, that the CUDA one registered itself.
#include <gtest/gtest.h>

#include <string>

#include "tensor/cuda_hooks.h"
#include "tensor/cuda_status.h"
#include "tensor/error.h"
#include "tensor/plugin.h"

namespace kiln {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Plugin, PathIsBesideLibkilnWithTheMajorVersion) {
  const std::string path = plugin_path("cuda");
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(path.front(), '/') << path;  // dladdr found libkiln's folder
  EXPECT_TRUE(path.ends_with("/libkiln_cuda.so.0")) << path;
  EXPECT_EQ(path.substr(0, path.rfind('/')), plugin_path("mpi").substr(0, plugin_path("mpi").rfind('/')));
}

TEST(Plugin, AMissingPluginIsReportedWithItsPathAndTheSameAnswerEveryTime) {
  EXPECT_FALSE(plugin_exists("no-such-backend"));
  const PluginLoad& first = load_plugin("no-such-backend");
  EXPECT_FALSE(first.loaded);
  EXPECT_EQ(first.error, "this Kiln was built without its no-such-backend backend: " +
                             plugin_path("no-such-backend") + " does not exist");
  const PluginLoad& second = load_plugin("no-such-backend");
  EXPECT_EQ(&first, &second);  // asked once
}

TEST(Plugin, MpiNamesItsOwnOption) {
  if (plugin_exists("mpi")) GTEST_SKIP() << "this build has libkiln_mpi; its absence cannot be seen";
  EXPECT_TRUE(contains(load_plugin("mpi").error, "(KILN_MPI=OFF)")) << load_plugin("mpi").error;
}

#ifdef KILN_WITH_CUDA

// The test program links libkiln_cuda, so its hooks were registered before
// main, and loading it again finds it loaded.
TEST(Plugin, TheCudaLibraryRegisteredItsHooks) {
  EXPECT_TRUE(plugin_exists("cuda"));
  ASSERT_NE(cuda::cuda_hooks(), nullptr);
  EXPECT_TRUE(load_plugin("cuda").loaded) << load_plugin("cuda").error;
  EXPECT_EQ(cuda::cuda_library_error(), "");
  EXPECT_EQ(cuda::cuda_hooks()->device_count(), cuda::device_count());
  // Without a GPU the reason is the driver's, not the library's.
  if (!cuda::is_available()) EXPECT_FALSE(contains(cuda::unavailable_reason(), "libkiln_cuda"));
}

#else

TEST(Plugin, WithoutTheCudaLibraryEveryCudaQuestionHasAnAnswer) {
  EXPECT_FALSE(plugin_exists("cuda"));
  EXPECT_EQ(cuda::cuda_hooks(), nullptr);
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::unavailable_reason(), load_plugin("cuda").error);
  EXPECT_TRUE(contains(cuda::unavailable_reason(), "(KILN_CUDA=OFF)")) << cuda::unavailable_reason();
  EXPECT_FALSE(cuda::gpu_status(0).has_value());
  for (const auto& call : {+[] { cuda::memory_stats(cuda_device(0)); },
                           +[] { cuda::reset_peak_memory_stats(cuda_device(0)); },
                           +[] { cuda::synchronize(cuda_device(0)); }}) {
    try {
      call();
      ADD_FAILURE() << "a CUDA call without the CUDA library did not throw";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "cannot use cuda:0: this Kiln was built without its cuda backend")) << e.what();
    }
  }
}

#endif

}  // namespace
}  // namespace kiln
