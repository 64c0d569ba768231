// The rendezvous of a ProcessGroupGloo: from a store and a rank to a gloo
// context whose pairs are connected to every peer.
//
// Note [Gloo rendezvous steps]
// A group's construction meets its peers in five steps, all within one
// deadline (options.timeout from the start), each of which names the ranks
// it still waits for when the deadline passes:
// 1. World size. Each rank posts its size under "gloo/size/<rank>" and reads
//    rank 0's, then every rank's. A rank started with another WORLD_SIZE is
//    named as such ("rank 3 was started with WORLD_SIZE=4 but rank 0 with
//    WORLD_SIZE=2") before it takes a generation number (Note [Gloo
//    rendezvous keys]), which would throw the others' numbering off.
//    Without this step the mismatch surfaced deep in gloo, as an address
//    list of the wrong length ("136 vs 272": one 136-byte address per peer)
//    inside a "could not connect" error. A store serves one job, so a
//    rank's size key is only ever rewritten with the same value.
// 2. Hosts. Each rank posts a HostReport under "gloo/<g>/host/<rank>"; a
//    group without a device yet (the world group) chooses what to listen on
//    from them (Note [Gloo interface]).
// 3. Addresses. Each rank makes one pair per peer on the device and posts
//    their addresses, in peer order, under "gloo/<g>/address/<rank>"; it
//    reads every peer's and checks their length.
// 4. Pairs. Each rank connects its pairs peer by peer, in rank order (of
//    two ranks, the one with the larger address connects and the other
//    accepts; gloo decides). Gloo waits up to five times the pair timeout for
//    a peer that never connects, so the connects run on a helper thread and
//    the caller waits for it only until the deadline. Then it throws naming
//    the peer rank and address the helper still waits for, and leaves the
//    helper to end at gloo's own timeout: it owns everything it touches.
// 5. Connected. Every rank posts "gloo/<g>/connected/<rank>" and waits for
//    all: a rank's connects can finish while a peer is still finishing the
//    handshake on their pair, and a rank that then closed the group at once
//    would fail that peer with "Connection closed by peer" (PyTorch's
//    store-based barrier after creating a group does the same).
// gloo's own connectFullMesh does steps 3 and 4 with none of the checks and
// an unbounded wait, which is why Kiln does them itself.
//
// Only the Gloo backend's own sources include this header (it includes gloo's).
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include <chrono>
#include <memory>
#include <string>

#include "distributed/store.h"

namespace kiln::distributed::gloo_backend {

struct Mesh {
  std::shared_ptr<::gloo::Context> context;  // every pair connected
  std::shared_ptr<Store> keys;               // the generation's keys, "gloo/<g>/"
  std::chrono::steady_clock::time_point deadline;
};

// Runs the steps of Note [Gloo rendezvous steps] for rank `rank` of the
// `size` ranks of group `group` meeting through `store`, within `timeout`.
// Makes `device` when it is null (step 2). Throws kiln::Error naming the
// rank, the group, the step and the peers it waited for, or the ranks whose
// world sizes disagree.
Mesh connect_mesh(const std::shared_ptr<Store>& store, int rank, int size, const std::string& group,
                  std::chrono::milliseconds timeout, std::shared_ptr<::gloo::transport::Device>& device);

}  // namespace kiln::distributed::gloo_backend
