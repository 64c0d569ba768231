// scripts/get-cifar10.sh, the script `make train` asks where CIFAR-10 is:
// where it looks and in what order, and its download path against a small
// archive of the official layout served on 127.0.0.1 by a server in this
// test (never the network beyond this machine): checksum verified, a
// mismatch or a closed port failing with a message that says what to do.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "data/cifar10.h"
#include "data/vision_datasets.h"
#include "tar_gz_writer.h"
#include "tensor/tensor.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using namespace test_archives;

// Answers every HTTP request on 127.0.0.1 with `body`, on a thread, until
// destroyed.
class OneFileServer {
 public:
  explicit OneFileServer(Bytes body) : body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(fd_, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;  // a free port, chosen by the kernel
    socklen_t length = sizeof address;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneFileServer() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept() with an error
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/cifar-10-binary.tar.gz"; }
  int requests() const { return requests_.load(); }

 private:
  void serve() {
    while (true) {
      const int client = ::accept(fd_, nullptr, nullptr);
      if (client < 0) return;
      std::string request;
      char buffer[1024];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::read(client, buffer, sizeof buffer);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
      }
      ++requests_;
      std::string reply =
          "HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: " + std::to_string(body_.size()) +
          "\r\nConnection: close\r\n\r\n";
      reply.append(body_.begin(), body_.end());
      for (size_t sent = 0; sent < reply.size();) {
        const ssize_t n = ::write(client, reply.data() + sent, reply.size() - sent);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      ::close(client);
    }
  }

  Bytes body_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// A port on 127.0.0.1 that nothing listens on: bound by the kernel's choice,
// then closed.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

struct ScriptRun {
  int status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

bool have(const char* tool) { return std::system(("command -v " + std::string(tool) + " >/dev/null").c_str()) == 0; }

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Image `id` of the small archive, (3, 32, 32) CHW bytes.
std::vector<uint8_t> image_bytes(int64_t id) {
  std::vector<uint8_t> out(kCifar10ImageBytes);
  for (int64_t p = 0; p < kCifar10ImageBytes; ++p) out[p] = static_cast<uint8_t>(id * 53 + p * 7);
  return out;
}

class GetCifar10Test : public ::testing::Test {
 protected:
  static constexpr int64_t kPerBatch = 2;  // training images 0..9, two in each of the five batches
  static constexpr int64_t kTest = 3;      // test images 100..102

  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_get_cifar10_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    repo_data_ = dir_ / "repo-data";
    kiln_data_ = dir_ / "kiln-data";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the script with the repository's data/ at repo_data_ and `env`
  // ("NAME=value ..." already quoted), without KILN_DATA or any proxy
  // unless `env` sets them.
  ScriptRun run(const std::string& env = "") {
    const fs::path err = dir_ / "stderr.txt";
    const std::string command =
        "env -u KILN_DATA -u KILN_CIFAR10_URL -u KILN_CIFAR10_MD5 -u http_proxy -u https_proxy -u HTTP_PROXY "
        "-u HTTPS_PROXY -u ALL_PROXY -u all_proxy KILN_REPO_DATA_DIR=" +
        quoted(repo_data_.string()) + " " + env + " bash " +
        quoted(std::string(KILN_SOURCE_DIR) + "/scripts/get-cifar10.sh") + " 2>" + quoted(err.string());
    ScriptRun result;
    FILE* pipe = ::popen(command.c_str(), "r");
    EXPECT_NE(pipe, nullptr) << command;
    if (pipe == nullptr) return result;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.out.append(buffer, n);
    const int status = ::pclose(pipe);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const Bytes err_bytes = read_bytes(err);
    result.err.assign(err_bytes.begin(), err_bytes.end());
    return result;
  }

  // Writes the six batch files of the small data set into `folder`.
  void write_batches(const fs::path& folder) {
    fs::create_directories(folder);
    auto write = [&](const std::string& name, int64_t first_id, int64_t n) {
      Tensor images = Tensor::empty({n, 3, 32, 32}, DType::UInt8);
      Tensor labels = Tensor::empty({n}, DType::Int64);
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<uint8_t> one = image_bytes(first_id + i);
        std::copy(one.begin(), one.end(), images.data<uint8_t>() + i * kCifar10ImageBytes);
        labels.data<int64_t>()[i] = (first_id + i) % kCifar10Classes;
      }
      write_cifar10_bin((folder / name).string(), images, labels);
    };
    for (int64_t b = 0; b < 5; ++b) write("data_batch_" + std::to_string(b + 1) + ".bin", b * kPerBatch, kPerBatch);
    write("test_batch.bin", 100, kTest);
  }

  // The small data set as cifar-10-binary.tar.gz holds it.
  Bytes small_archive() {
    const fs::path folder = dir_ / "src" / "cifar-10-batches-bin";
    write_batches(folder);
    std::vector<TarMember> members = {{"cifar-10-batches-bin/", {}, '5'}};
    for (const char* name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                             "data_batch_5.bin", "test_batch.bin"})
      members.push_back({std::string("cifar-10-batches-bin/") + name, read_bytes(folder / name)});
    return gzip_stored(tar_bytes(members));
  }

  std::string md5_of(const Bytes& bytes) {
    const fs::path path = dir_ / "md5-input";
    write_bytes(path, bytes);
    FILE* pipe = ::popen(("md5sum " + quoted(path.string())).c_str(), "r");
    char sum[33] = {};
    EXPECT_EQ(std::fread(sum, 1, 32, pipe), 32u);
    ::pclose(pipe);
    return sum;
  }

  fs::path dir_, repo_data_, kiln_data_;
};

TEST_F(GetCifar10Test, KilnDataComesBeforeTheRepositoryFolder) {
  write_batches(kiln_data_ / "cifar-10-batches-bin");
  write_bytes(repo_data_ / "cifar-10-binary.tar.gz", {1, 2, 3});
  ScriptRun with = run("KILN_DATA=" + quoted(kiln_data_.string()));
  EXPECT_EQ(with.status, 0) << with.err;
  EXPECT_EQ(with.out, (kiln_data_ / "cifar-10-batches-bin").string() + "\n");
  ScriptRun without = run();
  EXPECT_EQ(without.status, 0) << without.err;
  EXPECT_EQ(without.out, (repo_data_ / "cifar-10-binary.tar.gz").string() + "\n");
}

TEST_F(GetCifar10Test, CandidatesInAFolderInTheirOrder) {
  const fs::path jpeg_tree = repo_data_ / "cifar10-jpeg", bin = repo_data_ / "cifar-10-batches-bin";
  write_bytes(repo_data_ / "cifar10-jpeg.tar.gz", {1});
  EXPECT_EQ(run().out, (repo_data_ / "cifar10-jpeg.tar.gz").string() + "\n");
  fs::create_directories(jpeg_tree / "train");
  EXPECT_EQ(run().out, (repo_data_ / "cifar10-jpeg.tar.gz").string() + "\n") << "a tree without test/ is not one";
  fs::create_directories(jpeg_tree / "test");
  EXPECT_EQ(run().out, jpeg_tree.string() + "\n");
  write_bytes(repo_data_ / "cifar-10-binary.tar.gz", {1});
  EXPECT_EQ(run().out, (repo_data_ / "cifar-10-binary.tar.gz").string() + "\n");
  write_batches(bin);
  fs::remove(bin / "test_batch.bin");
  EXPECT_EQ(run().out, (repo_data_ / "cifar-10-binary.tar.gz").string() + "\n") << "five of six batch files";
  write_batches(bin);
  EXPECT_EQ(run().out, bin.string() + "\n");
}

TEST_F(GetCifar10Test, KilnDataMayNameTheDataItself) {
  write_batches(kiln_data_ / "cifar-10-batches-bin");
  fs::create_directories(kiln_data_ / "cifar10-jpeg" / "train");
  fs::create_directories(kiln_data_ / "cifar10-jpeg" / "test");
  write_bytes(kiln_data_ / "mine.tar.gz", {1});
  for (const fs::path& itself :
       {kiln_data_ / "cifar-10-batches-bin", kiln_data_ / "cifar10-jpeg", kiln_data_ / "mine.tar.gz"}) {
    ScriptRun r = run("KILN_DATA=" + quoted(itself.string()));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, itself.string() + "\n");
  }
}

TEST_F(GetCifar10Test, KilnDataThatDoesNotExistIsAnError) {
  write_bytes(repo_data_ / "cifar-10-binary.tar.gz", {1});
  ScriptRun r = run("KILN_DATA=" + quoted((dir_ / "typo").string()));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("KILN_DATA is '" + (dir_ / "typo").string() + "', which does not exist"), std::string::npos)
      << r.err;
}

TEST_F(GetCifar10Test, KilnDataWithoutCifarFallsBackToTheRepositoryFolder) {
  fs::create_directories(kiln_data_);
  write_bytes(repo_data_ / "cifar10-jpeg.tar.gz", {1});
  ScriptRun r = run("KILN_DATA=" + quoted(kiln_data_.string()));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, (repo_data_ / "cifar10-jpeg.tar.gz").string() + "\n");
  EXPECT_NE(r.err.find("holds no CIFAR-10; looking in " + repo_data_.string()), std::string::npos) << r.err;
}

TEST_F(GetCifar10Test, DownloadsVerifiesAndTheArchiveLoads) {
  if (!have("curl") || !have("md5sum")) GTEST_SKIP() << "curl or md5sum is not installed";
  const Bytes archive = small_archive();
  OneFileServer server(archive);
  const std::string env = "KILN_CIFAR10_URL=" + quoted(server.url()) + " KILN_CIFAR10_MD5=" + md5_of(archive);
  ScriptRun r = run(env);
  ASSERT_EQ(r.status, 0) << r.err;
  const fs::path target = repo_data_ / "cifar-10-binary.tar.gz";
  EXPECT_EQ(r.out, target.string() + "\n");
  EXPECT_EQ(server.requests(), 1);
  EXPECT_EQ(read_bytes(target), archive);
  EXPECT_FALSE(fs::exists(repo_data_ / "cifar-10-binary.tar.gz.part"));
  EXPECT_NE(r.err.find("downloading " + server.url()), std::string::npos) << r.err;

  Cifar10Dataset train(target.string(), true), test(target.string(), false);
  ASSERT_EQ(train.size(), 5 * kPerBatch);
  ASSERT_EQ(test.size(), kTest);
  for (int64_t i = 0; i < train.size(); ++i) {
    Example e = train.get(i);
    EXPECT_EQ(std::vector<uint8_t>(e.data.data<uint8_t>(), e.data.data<uint8_t>() + kCifar10ImageBytes), image_bytes(i))
        << "train image " << i;
    EXPECT_EQ(e.target.item<int64_t>(), i % kCifar10Classes);
  }
  EXPECT_EQ(test.get(2).target.item<int64_t>(), 102 % kCifar10Classes);

  // Found now: no second download.
  ScriptRun again = run(env);
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(again.out, target.string() + "\n");
  EXPECT_EQ(server.requests(), 1);
}

TEST_F(GetCifar10Test, ChecksumMismatchDeletesTheDownload) {
  if (!have("curl") || !have("md5sum")) GTEST_SKIP() << "curl or md5sum is not installed";
  const Bytes archive = small_archive();
  OneFileServer server(archive);
  const std::string wrong = "0123456789abcdef0123456789abcdef";
  ScriptRun r = run("KILN_CIFAR10_URL=" + quoted(server.url()) + " KILN_CIFAR10_MD5=" + wrong);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(server.requests(), 1);
  EXPECT_NE(
      r.err.find("checksum mismatch for " + server.url() + ": expected md5 " + wrong + ", got " + md5_of(archive)),
      std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(repo_data_ / "cifar-10-binary.tar.gz.part"));
  EXPECT_FALSE(fs::exists(repo_data_ / "cifar-10-binary.tar.gz"));
}

TEST_F(GetCifar10Test, WithoutNetworkSaysWhereToPutWhichFiles) {
  if (!have("curl")) GTEST_SKIP() << "curl is not installed";
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port()) + "/cifar-10-binary.tar.gz";
  ScriptRun r = run("KILN_CIFAR10_URL=" + quoted(url));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  const std::string d = repo_data_.string();
  for (const std::string& part :
       {"cannot download " + url, d + "/cifar-10-binary.tar.gz", d + "/cifar-10-batches-bin/",
        std::string("data_batch_1.bin .. data_batch_5.bin and test_batch.bin"), d + "/cifar10-jpeg.tar.gz",
        d + "/cifar10-jpeg/{train,test}/<class>/<image>.jpg", std::string("set KILN_DATA to a folder"),
        std::string("c32a1d4ab5d03f1284b67883e8d87530")})
    EXPECT_NE(r.err.find(part), std::string::npos) << "stderr was:\n" << r.err << "\nexpected: " << part;
  EXPECT_FALSE(fs::exists(repo_data_ / "cifar-10-binary.tar.gz.part"));
}

TEST_F(GetCifar10Test, DefaultsAreTheOfficialReleaseAndItsChecksum) {
  const Bytes script = read_bytes(fs::path(KILN_SOURCE_DIR) / "scripts" / "get-cifar10.sh");
  const std::string text(script.begin(), script.end());
  EXPECT_NE(text.find("readonly official_url=\"https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz\""),
            std::string::npos);
  EXPECT_NE(text.find("readonly official_md5=\"c32a1d4ab5d03f1284b67883e8d87530\""), std::string::npos);
}

}  // namespace
}  // namespace kiln::data
