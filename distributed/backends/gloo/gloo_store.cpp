#include "distributed/backends/gloo/gloo_store.h"

namespace kiln::distributed::gloo_backend {

GlooStore::GlooStore(std::shared_ptr<kiln::distributed::Store> store) : store_(std::move(store)) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  const std::vector<uint8_t> value = store_->get(key);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { store_->wait(keys); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace kiln::distributed::gloo_backend
