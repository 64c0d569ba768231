// Every Store method, run against both TCPStore and FileStore; and
// PrefixStore over each.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/file_store.h"
#include "distributed/store.h"
#include "distributed/tcp_store.h"
#include "store_test_util.h"

namespace kiln::distributed {
namespace {

using namespace std::chrono_literals;
using testing::bytes;
using testing::Children;
using testing::error_of;
using testing::seconds_since;
using testing::TempDir;

constexpr std::chrono::milliseconds kTestTimeout = 5s;

// GetParam(): "tcp" or "file". store_ is the store under test; connect()
// opens another client of the same store, as another process would.
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") {
      tcp_ = TCPStore::serve("127.0.0.1", 0, kTestTimeout);
      store_ = tcp_;
    } else {
      path_ = dir_.path() + "/store";
      store_ = std::make_shared<FileStore>(path_, 1, kTestTimeout);
    }
  }

  std::unique_ptr<Store> connect() const {
    if (GetParam() == "tcp") return std::make_unique<TCPStore>("127.0.0.1", tcp_->port(), kTestTimeout);
    return std::make_unique<FileStore>(path_, 1, kTestTimeout);
  }

  TempDir dir_;
  std::string path_;
  std::shared_ptr<TCPStore> tcp_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetGetAndOverwrite) {
  store_->set("a", "first");
  EXPECT_EQ(store_->get_string("a"), "first");
  store_->set("a", "second");
  EXPECT_EQ(store_->get_string("a"), "second");
  // Values are bytes: zeros, high bytes and the empty value survive.
  const std::vector<uint8_t> binary = {0, 255, 1, 0, 128};
  store_->set("binary", binary);
  store_->set("empty", std::vector<uint8_t>{});
  auto other = connect();
  EXPECT_EQ(other->get("binary"), binary);
  EXPECT_EQ(other->get("empty"), std::vector<uint8_t>{});
  EXPECT_EQ(other->get_string("a"), "second");
}

TEST_P(StoreTest, AddCountsFromZeroAndStoresDecimalText) {
  EXPECT_EQ(store_->add("counter", 5), 5);
  EXPECT_EQ(store_->add("counter", -7), -2);
  EXPECT_EQ(store_->get_string("counter"), "-2");
  store_->set("text", "12");
  EXPECT_EQ(store_->add("text", 30), 42);
  store_->set("word", "abc");
  EXPECT_EQ(error_of([&] { store_->add("word", 1); }),
            store_->describe() + ": add('word', 1): its value 'abc' is not an integer" +
                (GetParam() == "tcp" ? ", or adding 1 to it overflows int64" : ""));
}

TEST_P(StoreTest, AddFromSeveralThreads) {
  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures = 0;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, client = std::shared_ptr<Store>(store_->clone())] {
      try {
        for (int i = 0; i < kAdds; ++i) client->add("counter", 1);
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(store_->get_string("counter"), std::to_string(kThreads * kAdds));
}

TEST_P(StoreTest, AddFromSeveralProcesses) {
  constexpr int kChildren = 3, kAdds = 40;
  Children children;
  for (int c = 0; c < kChildren; ++c) {
    children.spawn([&] {
      auto client = connect();
      int64_t last = 0;
      for (int i = 0; i < kAdds; ++i) {
        const int64_t now = client->add("counter", 1);
        if (now <= last) return false;  // every add must see the others' adds
        last = now;
      }
      return true;
    });
  }
  EXPECT_EQ(children.wait_all(10s), std::vector<int>(kChildren, 0));
  EXPECT_EQ(store_->get_string("counter"), std::to_string(kChildren * kAdds));
}

TEST_P(StoreTest, CompareSetWinsLosesAndHandlesMissingKeys) {
  // Missing key: an empty `expected` matches and sets it.
  EXPECT_EQ(store_->compare_set("k", {}, bytes("one")), bytes("one"));
  // Mismatch: nothing changes; the current value comes back.
  EXPECT_EQ(store_->compare_set("k", bytes("zero"), bytes("two")), bytes("one"));
  EXPECT_EQ(store_->get_string("k"), "one");
  // Match: the caller wins.
  EXPECT_EQ(store_->compare_set("k", bytes("one"), bytes("two")), bytes("two"));
  EXPECT_EQ(store_->get_string("k"), "two");
  // Missing key with a non-empty `expected`: no value before or after.
  EXPECT_EQ(store_->compare_set("absent", bytes("x"), bytes("y")), std::vector<uint8_t>{});
  EXPECT_FALSE(store_->check({"absent"}));
}

TEST_P(StoreTest, WaitReturnsOnceAnotherClientSetsTheKeys) {
  std::thread setter([client = std::shared_ptr<Store>(connect())] {
    std::this_thread::sleep_for(50ms);
    client->set("a", "1");
    std::this_thread::sleep_for(50ms);
    client->set("b", "2");
  });
  const auto start = std::chrono::steady_clock::now();
  store_->wait({"a", "b"}, 3s);
  const double waited = seconds_since(start);
  setter.join();
  EXPECT_GE(waited, 0.09);
  EXPECT_LT(waited, 1.5);
  EXPECT_EQ(store_->get_string("b"), "2");
}

TEST_P(StoreTest, WaitTimesOutNamingTheMissingKeys) {
  store_->set("present", "1");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of([&] { store_->wait({"present", "missing"}, 150ms); }),
            store_->describe() + ": wait(['present', 'missing']) timed out after 150 ms; still missing: ['missing']");
  const double waited = seconds_since(start);
  EXPECT_GE(waited, 0.14);
  EXPECT_LT(waited, 1.5);
  // The store still answers after a timeout.
  store_->set("after", "yes");
  EXPECT_EQ(store_->get_string("after"), "yes");
}

TEST_P(StoreTest, GetTimesOutAfterTheStoreTimeout) {
  store_->set_timeout(120ms);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of([&] { store_->get("nobody"); }), store_->describe() + ": get('nobody') timed out after 120 ms");
  EXPECT_LT(seconds_since(start), 1.5);
}

TEST_P(StoreTest, CheckDeleteAndNumKeys) {
  EXPECT_EQ(store_->num_keys(), 0);
  EXPECT_TRUE(store_->check({}));
  EXPECT_FALSE(store_->check({"a"}));
  store_->set("a", "1");
  store_->add("b", 1);
  EXPECT_TRUE(store_->check({"a", "b"}));
  EXPECT_FALSE(store_->check({"a", "c"}));
  EXPECT_EQ(store_->num_keys(), 2);
  EXPECT_TRUE(store_->delete_key("a"));
  EXPECT_FALSE(store_->delete_key("a"));
  EXPECT_FALSE(store_->delete_key("never"));
  EXPECT_FALSE(store_->check({"a"}));
  EXPECT_EQ(store_->num_keys(), 1);
  auto other = connect();
  EXPECT_FALSE(other->check({"a"}));
  EXPECT_EQ(other->num_keys(), 1);
  store_->set("a", "again");
  EXPECT_EQ(other->get_string("a"), "again");
}

TEST_P(StoreTest, CloneFromAnotherThreadWhileOneIsBlockedInGet) {
  std::atomic<bool> set_done = false;
  std::thread helper([&] {
    std::this_thread::sleep_for(100ms);
    // The main thread holds store_'s client in get(); a clone must not wait for it.
    auto clone = store_->clone();
    clone->set("late", "value");
    set_done = true;
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string value = store_->get_string("late");
  helper.join();
  EXPECT_EQ(value, "value");
  EXPECT_TRUE(set_done);
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST_P(StoreTest, PrefixStoresKeepTheirKeysApart) {
  PrefixStore a("group1", store_), b("group2", store_);
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(a.get_string("k"), "from a");
  EXPECT_EQ(b.get_string("k"), "from b");
  EXPECT_EQ(store_->get_string("group1/k"), "from a");
  EXPECT_FALSE(store_->check({"k"}));

  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_EQ(a.compare_set("k", bytes("from a"), bytes("new a")), bytes("new a"));
  EXPECT_EQ(b.get_string("k"), "from b");
  EXPECT_TRUE(a.check({"k", "n"}));
  b.set("only b", "1");
  EXPECT_FALSE(a.check({"only b"}));
  EXPECT_TRUE(a.delete_key("k"));
  EXPECT_TRUE(b.check({"k"}));
  a.wait({"n"}, 1s);
  // num_keys() counts the whole base store, as PyTorch's PrefixStore does.
  EXPECT_EQ(a.num_keys(), store_->num_keys());

  EXPECT_EQ(a.describe(), store_->describe() + " (prefix 'group1')");
  EXPECT_EQ(a.timeout(), kTestTimeout);
  auto clone = a.clone();
  EXPECT_EQ(clone->get_string("n"), "2");
  EXPECT_EQ(clone->describe(), a.describe());
}

TEST_P(StoreTest, PrefixStoreGetUsesItsOwnTimeout) {
  auto prefixed = std::make_shared<PrefixStore>("g", store_);
  prefixed->set_timeout(100ms);  // the base keeps its 5 s
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { prefixed->get("missing"); });
  EXPECT_LT(seconds_since(start), 1.5);
  EXPECT_NE(message.find("wait(['g/missing']) timed out after 100 ms"), std::string::npos) << message;
  // Prefixes nest.
  PrefixStore inner("sub", prefixed);
  inner.set("x", "1");
  EXPECT_EQ(store_->get_string("g/sub/x"), "1");
  EXPECT_EQ(inner.describe(), store_->describe() + " (prefix 'g') (prefix 'sub')");
}

INSTANTIATE_TEST_SUITE_P(BothStores, StoreTest, ::testing::Values("tcp", "file"),
                         [](const auto& info) { return info.param; });

TEST(FileStore, TheFileGoesOnlyWhenEveryInstanceOfTheWorldHasClosed) {
  // Note [File store log]: with world_size 2, the file stays while either
  // instance (or a clone of it) is open and goes after the second closes.
  TempDir dir;
  const std::string path = dir.path() + "/store";
  auto first = std::make_unique<FileStore>(path, 2, 1s);
  auto second = std::make_unique<FileStore>(path, 2, 1s);
  first->set("k", "v");
  std::unique_ptr<Store> clone = second->clone();
  first.reset();
  EXPECT_TRUE(std::filesystem::exists(path));
  second.reset();
  EXPECT_TRUE(std::filesystem::exists(path)) << "the clone still uses it";
  EXPECT_EQ(clone->get_string("k"), "v");
  clone.reset();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(PrefixStore, RejectsANullBase) {
  EXPECT_EQ(error_of([] { PrefixStore("p", nullptr); }), "PrefixStore('p'): the base store is null");
}

}  // namespace
}  // namespace kiln::distributed
