// GlooStore: a Kiln Store seen through gloo's rendezvous interface.
//
// gloo::rendezvous::Context::connectFullMesh publishes each rank's pair
// addresses under the key "<rank>" and reads the others' (Note [Store]).
// This adapter forwards those calls to one of our stores, so Gloo meets its
// peers through the same TCPStore or FileStore as the rest of the job; the
// caller puts it under a prefix that is unique to one group (Note [Gloo
// rendezvous keys] in process_group_gloo.h).
//
// Only the Gloo backend's own sources include this header (it includes gloo's).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/store.h"

namespace kiln::distributed::gloo_backend {

class GlooStore : public ::gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<kiln::distributed::Store> store);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits up to the store's timeout for `key`, as gloo expects of get().
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<kiln::distributed::Store> store_;
};

}  // namespace kiln::distributed::gloo_backend
