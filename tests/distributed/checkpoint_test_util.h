// Shared by the sharded-checkpoint tests (sharded_checkpoint_test.cpp,
// fsdp_state_dict_test.cpp): a directory that the test process and its rank
// processes (Note [Multi-process tests]) all see, bit-for-bit comparison,
// and error messages.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "multi_process.h"
#include "tensor/error.h"
#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace kiln::distributed::testing {

// A directory named after the test process, so that the rank processes it
// starts find the same one: "<tmp>/kiln-<name>-<pid of the test process>".
// The test process makes it fresh (removing an old one); it is removed when
// the test process's SharedDir goes out of scope.
class SharedDir {
 public:
  explicit SharedDir(const std::string& name) {
    const char* parent = std::getenv("KILN_TEST_PARENT_PID");
    const bool rank = in_rank_process() && parent != nullptr;
    path_ = std::filesystem::temp_directory_path().string() + "/kiln-" + name + "-" +
            (rank ? std::string(parent) : std::to_string(::getpid()));
    owner_ = !in_rank_process();
    if (owner_) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
  }
  ~SharedDir() {
    if (!owner_) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& child) const { return path_ + "/" + child; }

 private:
  std::string path_;
  bool owner_ = false;
};

// Same dtype, shape and bytes (so -0.0 differs from 0.0 and NaNs compare by payload).
inline bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.detach().cpu().contiguous(), cb = b.detach().cpu().contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Every key of `expected` in `actual` (and nothing else), bit for bit, in the same order.
inline void expect_bit_equal(const TensorDict& actual, const TensorDict& expected, const std::string& what) {
  EXPECT_EQ(actual.keys(), expected.keys()) << what;
  for (const auto& [name, t] : expected) {
    if (!actual.contains(name)) continue;
    EXPECT_TRUE(bit_equal(actual.at(name), t))
        << what << ": '" << name << "' differs: "
        << kiln::detail::str(actual.at(name).dtype(), " ", actual.at(name).shape(), " vs ", t.dtype(), " ", t.shape());
  }
}

// The message of the kiln::Error `f` throws, or "<no error>".
template <class F>
std::string checkpoint_error(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.message();
  }
  return "<no error>";
}

// Expects `f` to throw kiln::Error with every one of `parts` in its message.
template <class F>
void expect_checkpoint_error(F&& f, const std::vector<std::string>& parts) {
  const std::string message = checkpoint_error(f);
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "expected \"" << part << "\" in: " << message;
}

// Names in `dir`'s parent that start with "<dir's name>.tmp." or ".old." (a
// save's leftovers).
inline std::vector<std::string> leftover_temporaries(const std::string& dir) {
  const std::filesystem::path path(dir);
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(path.filename().string() + ".tmp.") || name.starts_with(path.filename().string() + ".old."))
      found.push_back(name);
  }
  return found;
}

}  // namespace kiln::distributed::testing
