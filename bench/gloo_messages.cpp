// What the shape of a step's messages costs on Gloo's TCP pairs, the
// measurement behind Note [Calls in the first message]
// (distributed/backends/gloo/call_exchange.h). Two rank processes exchange
// N bytes each way in one of these forms, each timed against the plain form
// in the same process pair, alternating call by call, so that where the
// scheduler put the pair's threads (which moves an exchange's time by up to
// 2x from one pair of processes to the next) is the same for both:
//
//   one      one N-byte message (the plain form, and the baseline)
//   again    one N-byte message again: the baseline against itself, the noise
//   split    a first message of the header and 256 KiB of data, then
//            the other N - 256 KiB as a second message
//   header   a first message of the header alone, then the N bytes whole
//   inline   one message of the header and the N bytes (N <= 256 KiB), copied
//            into it, received into a header + 256 KiB buffer: what a
//            checked step of a small all-reduce sends
//   padded   one message of N + header bytes, sent from a buffer written
//            once, into a receive of its length: the message's length
//            alone, without the copy
//
// The header is --header bytes: 56 by default, 8 + one 48-byte call, what
// CallExchange sends in the one step of 2 ranks (it sent the whole table
// of calls, 104 bytes for 2 ranks, before 2026-12-07). split and header
// need N > 256 KiB, inline N <= 256 KiB.
//
// Each form runs in its own process pairs. Per pair it prints the median of
// the per-call time ratios form / one.
//
// This program uses Gloo directly, not a Kiln process group, so that only
// the messages differ: no reduction, no communication thread, no check.
//
// Usage: build/bench/gloo_messages [--bytes 4194304] [--calls 300] [--pairs 4]
//                                  [--forms again,split,header,inline,padded] [--header 56]

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr size_t kFirstData = size_t{256} << 10;  // kFirstMessageData
constexpr uint64_t kSlotOne = 1, kSlotFirst = 2, kSlotRest = 3;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// One rank of one process pair; rank 0 prints "form=F bytes=N ratio=R one_us=T form_us=T".
void run_rank(int rank, const std::string& store_dir, const std::string& form, size_t bytes, size_t header_bytes,
              int calls) {
  auto device = ::gloo::transport::tcp::CreateDevice(::gloo::transport::tcp::attr("127.0.0.1"));
  ::gloo::rendezvous::FileStore store(store_dir);
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank, 2);
  context->connectFullMesh(store, device);
  const int peer = 1 - rank;

  std::vector<char> data(bytes, static_cast<char>(rank + 1));
  std::vector<char> in(header_bytes + kFirstData + bytes), out(header_bytes + kFirstData);

  // Posts every receive, then every send, then waits for all: as CallExchange does.
  auto exchange = [&](std::vector<std::pair<char*, size_t>> receives, std::vector<std::pair<char*, size_t>> sends,
                      const std::vector<uint64_t>& slots) {
    std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> in_buffers, out_buffers;
    for (size_t i = 0; i < receives.size(); ++i) {
      in_buffers.push_back(context->createUnboundBuffer(receives[i].first, receives[i].second));
      in_buffers.back()->recv(peer, slots[i]);
    }
    for (size_t i = 0; i < sends.size(); ++i) {
      out_buffers.push_back(context->createUnboundBuffer(sends[i].first, sends[i].second));
      out_buffers.back()->send(peer, slots[i]);
    }
    for (auto& b : in_buffers) b->waitRecv();
    for (auto& b : out_buffers) b->waitSend();
  };
  auto one = [&] { exchange({{in.data(), bytes}}, {{data.data(), bytes}}, {kSlotOne}); };
  std::function<void()> timed = one;
  if (form == "split") {
    timed = [&] {
      const size_t first = std::min(bytes, kFirstData), rest = bytes - first;
      std::memcpy(out.data() + header_bytes, data.data(), first);
      exchange({{in.data(), header_bytes + kFirstData}, {in.data() + header_bytes + kFirstData, rest}},
               {{out.data(), header_bytes + first}, {data.data() + first, rest}}, {kSlotFirst, kSlotRest});
    };
  } else if (form == "inline") {
    timed = [&] {
      std::memcpy(out.data() + header_bytes, data.data(), bytes);
      exchange({{in.data(), header_bytes + kFirstData}}, {{out.data(), header_bytes + bytes}}, {kSlotFirst});
    };
  } else if (form == "padded") {
    timed = [&] { exchange({{in.data(), header_bytes + bytes}}, {{out.data(), header_bytes + bytes}}, {kSlotFirst}); };
  } else if (form == "header") {
    timed = [&] {
      exchange({{in.data(), header_bytes + kFirstData}, {in.data() + header_bytes + kFirstData, bytes}},
               {{out.data(), header_bytes}, {data.data(), bytes}}, {kSlotFirst, kSlotRest});
    };
  }

  for (int i = 0; i < 10; ++i) {
    one();
    timed();
  }
  std::vector<double> one_times, form_times, ratios;
  for (int i = 0; i < calls; ++i) {
    double seconds[2];
    for (int k = 0; k < 2; ++k) {
      const bool plain = (k == 0) == (i % 2 == 0);  // the order alternates
      const auto start = std::chrono::steady_clock::now();
      plain ? one() : timed();
      seconds[plain ? 0 : 1] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    one_times.push_back(seconds[0]);
    form_times.push_back(seconds[1]);
    ratios.push_back(seconds[1] / seconds[0]);
  }
  if (rank == 0) {
    std::printf("form=%s bytes=%zu ratio=%.3f one_us=%.1f form_us=%.1f\n", form.c_str(), bytes, median(ratios),
                median(one_times) * 1e6, median(form_times) * 1e6);
    std::fflush(stdout);
  }
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ',');) parts.push_back(part);
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{4} << 20;
  int calls = 300, pairs = 4;
  size_t header = 56;
  std::string forms = "again,split,header";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--bytes") bytes = std::stoull(value);
    else if (flag == "--calls") calls = std::stoi(value);
    else if (flag == "--pairs") pairs = std::stoi(value);
    else if (flag == "--forms") forms = value;
    else if (flag == "--header") header = std::stoull(value);
    else {
      std::fprintf(stderr, "gloo_messages: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  for (const std::string& form : split_commas(forms)) {
    const bool small = form == "inline" || form == "again" || form == "padded";
    if (!small && bytes <= kFirstData) {
      std::fprintf(stderr, "gloo_messages: form %s needs --bytes above the first message's %zu bytes of data\n",
                   form.c_str(), kFirstData);
      return 2;
    }
    if (form == "inline" && bytes > kFirstData) {
      std::fprintf(stderr, "gloo_messages: form inline needs --bytes of at most %zu\n", kFirstData);
      return 2;
    }
  }
  std::printf("# gloo_messages: 2 ranks over TCP on 127.0.0.1, %zu bytes each way, a %zu-byte header, %d calls per "
              "pair; ratio = the median per-call time of the form over one message's\n",
              bytes, header, calls);
  std::fflush(stdout);
  for (int pair = 0; pair < pairs; ++pair) {
    for (const std::string& form : split_commas(forms)) {
      const std::string dir = (std::filesystem::temp_directory_path() /
                               ("kiln-gloo-messages-" + std::to_string(getpid()) + "-" + std::to_string(pair) + form))
                                  .string();
      std::filesystem::create_directories(dir);
      std::vector<pid_t> children;
      for (int rank = 0; rank < 2; ++rank) {
        const pid_t child = fork();
        if (child == 0) {
          run_rank(rank, dir, form, bytes, header, calls);
          std::_Exit(0);
        }
        children.push_back(child);
      }
      int failed = 0;
      for (pid_t child : children) {
        int status = 0;
        waitpid(child, &status, 0);
        failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      }
      std::filesystem::remove_all(dir);
      if (failed) {
        std::fprintf(stderr, "gloo_messages: a rank of form %s failed\n", form.c_str());
        return 1;
      }
    }
  }
  return 0;
}
