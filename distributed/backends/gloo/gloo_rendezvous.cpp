#include "distributed/backends/gloo/gloo_rendezvous.h"

#include <gloo/transport/context.h>
#include <gloo/transport/tcp/address.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/backends/gloo/gloo_device.h"
#include "tensor/error.h"

namespace kiln::distributed::gloo_backend {

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

// A gloo context over pairs that connect_mesh connected itself (gloo's own
// rendezvous::Context would connect them in connectFullMesh).
class MeshContext : public ::gloo::Context {
 public:
  MeshContext(int rank, int size) : ::gloo::Context(rank, size) {}
  void adopt(std::shared_ptr<::gloo::transport::Device> device,
             std::shared_ptr<::gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// Who is meeting whom, for every message.
struct Meeting {
  std::shared_ptr<Store> store;
  int rank;
  int size;
  std::string group;
  std::chrono::milliseconds timeout;
  Clock::time_point deadline;

  std::string who() const { return detail::str("gloo: rank ", rank, " of group '", group, "' (size ", size, ")"); }
  // At least 1 ms: a store may read 0 as "no limit".
  std::chrono::milliseconds left() const {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }
};

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// The values of "<key>/<r>" for r in `ranks`, waiting for them until the
// deadline; throws naming the ranks that did not post, and `what` they
// were to do ("post its world size").
std::vector<Bytes> gather(Store& keys, const std::string& key, const std::vector<int>& ranks, const Meeting& m,
                          const std::string& what) {
  std::vector<std::string> names;
  for (int r : ranks) names.push_back(key + "/" + std::to_string(r));
  try {
    keys.wait(names, m.left());
  } catch (const std::exception& e) {
    std::vector<int> missing;
    try {
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (!keys.check({names[i]})) missing.push_back(ranks[i]);
      }
    } catch (const std::exception&) {
      missing.clear();  // the store itself is gone; its first error says how
    }
    KILN_CHECK(missing.empty(), m.who(), " waited ", m.timeout.count(), " ms (the rendezvous timeout) through ",
               keys.describe(), " for ", ranks_text(missing), " to ", what, "; ",
               missing.size() == 1 ? "it has" : "they have", " not (exited, hung, or never started?)");
    KILN_FAIL(m.who(), ": waiting for ranks to ", what, ": ", e.what());
  }
  std::vector<Bytes> values;
  for (const std::string& name : names) values.push_back(keys.get(name));
  return values;
}

std::vector<int> all_ranks(int size) {
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

std::string text_of(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

// Step 1: throws if any rank was given another size than this one.
void agree_on_size(const Meeting& m) {
  m.store->set("gloo/size/" + std::to_string(m.rank), std::to_string(m.size));
  auto check = [&](const std::vector<int>& ranks) {
    const std::vector<Bytes> sizes = gather(*m.store, "gloo/size", ranks, m, "post its world size");
    for (size_t i = 0; i < ranks.size(); ++i) {
      const std::string theirs = text_of(sizes[i]);
      KILN_CHECK(theirs == std::to_string(m.size), "gloo: rank ", m.rank, " of group '", m.group,
                 "' was started with WORLD_SIZE=", m.size, " but rank ", ranks[i], " with WORLD_SIZE=", theirs,
                 "; every rank must be given the same world size (did the nodes get different --nnodes or "
                 "--nproc-per-node?)");
    }
  };
  // Rank 0 first: a rank whose size is larger than the job's would wait in
  // vain for ranks that do not exist.
  check({0});
  check(all_ranks(m.size));
}

// What the helper thread of step 4 is doing, shared with the caller.
struct PairProgress {
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false;
  std::exception_ptr error;
  int peer = -1;
  std::string peer_address;
};

// Step 4: connects pair `peer` to `addresses[peer]` for every peer, on a
// helper thread bounded by the deadline.
void connect_pairs(const Meeting& m, const std::shared_ptr<::gloo::transport::Device>& device,
                   const std::shared_ptr<::gloo::transport::Context>& transport,
                   const std::vector<std::vector<char>>& addresses) {
  auto progress = std::make_shared<PairProgress>();
  std::thread helper([m, device, transport, addresses, progress] {
    try {
      for (int peer = 0; peer < m.size; ++peer) {
        if (peer == m.rank) continue;
        const std::vector<char>& address = addresses[static_cast<size_t>(peer)];
        {
          std::lock_guard lock(progress->mutex);
          progress->peer = peer;
          progress->peer_address = ::gloo::transport::tcp::Address(address).str();
        }
        transport->getPair(peer)->connect(address);
      }
    } catch (...) {
      std::lock_guard lock(progress->mutex);
      progress->error = std::current_exception();
    }
    std::lock_guard lock(progress->mutex);
    progress->done = true;
    progress->changed.notify_all();
  });
  std::unique_lock lock(progress->mutex);
  if (!progress->changed.wait_until(lock, m.deadline, [&] { return progress->done; })) {
    const int peer = progress->peer;
    const std::string address = progress->peer_address;
    lock.unlock();
    helper.detach();
    KILN_FAIL(m.who(), " waited ", m.timeout.count(), " ms (the rendezvous timeout) for rank ", peer, " at ", address,
              " to connect (this rank listens on ", device->str(), "); is rank ", peer,
              " alive, and can this host reach that address? KILN_GLOO_SOCKET_IFNAME names the interface to "
              "listen on");
  }
  lock.unlock();
  helper.join();
  if (!progress->error) return;
  try {
    std::rethrow_exception(progress->error);
  } catch (const std::exception& e) {
    KILN_FAIL(m.who(), " cannot connect to rank ", progress->peer, " at ", progress->peer_address,
              " (this rank listens on ", device->str(), "): ", e.what());
  }
}

}  // namespace

Mesh connect_mesh(const std::shared_ptr<Store>& store, int rank, int size, const std::string& group,
                  std::chrono::milliseconds timeout, std::shared_ptr<::gloo::transport::Device>& device) {
  const Meeting m{store, rank, size, group, timeout, Clock::now() + timeout};
  agree_on_size(m);

  // Step 2 (Note [Gloo rendezvous keys] for the generation).
  const int64_t generation = (store->add("gloo/groups", 1) - 1) / size;
  auto keys = std::make_shared<PrefixStore>("gloo/" + std::to_string(generation), store);
  keys->set("host/" + std::to_string(rank), this_host(*store).encode());
  const std::vector<Bytes> reports = gather(*keys, "host", all_ranks(size), m, "report its host");
  if (!device) {
    std::vector<HostReport> hosts;
    for (const Bytes& report : reports) hosts.push_back(HostReport::decode(text_of(report)));
    try {
      device = make_tcp_device(choose_tcp_device(hosts, rank));
    } catch (const Error& e) {
      KILN_FAIL(m.who(), ": ", e.message());
    }
  }

  // Step 3.
  std::shared_ptr<::gloo::transport::Context> transport = device->createContext(rank, size);
  transport->setTimeout(timeout);
  Bytes own;
  size_t address_bytes = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const std::vector<char> address = transport->createPair(peer)->address().bytes();
    address_bytes = address.size();
    own.insert(own.end(), address.begin(), address.end());
  }
  keys->set("address/" + std::to_string(rank), own);
  const std::vector<Bytes> posted = gather(*keys, "address", all_ranks(size), m, "post its pair addresses");
  std::vector<std::vector<char>> addresses(static_cast<size_t>(size));  // the peer's pair for this rank
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const Bytes& theirs = posted[static_cast<size_t>(peer)];
    KILN_CHECK(theirs.size() == address_bytes * static_cast<size_t>(size - 1), m.who(), ": rank ", peer, " posted ",
               theirs.size(), " bytes of pair addresses, but ", size - 1, " addresses of ", address_bytes,
               " bytes were expected (is it running another build of gloo?)");
    // A rank lists its pairs in peer order, skipping itself.
    const size_t index = static_cast<size_t>(rank < peer ? rank : rank - 1);
    addresses[static_cast<size_t>(peer)].assign(theirs.begin() + static_cast<std::ptrdiff_t>(index * address_bytes),
                                                theirs.begin() + static_cast<std::ptrdiff_t>((index + 1) * address_bytes));
  }

  connect_pairs(m, device, transport, addresses);  // step 4

  keys->set("connected/" + std::to_string(rank), std::string("1"));  // step 5
  gather(*keys, "connected", all_ranks(size), m, "finish connecting its pairs");

  auto context = std::make_shared<MeshContext>(rank, size);
  context->setTimeout(timeout);
  context->adopt(device, transport);
  return {context, keys, m.deadline};
}

}  // namespace kiln::distributed::gloo_backend
