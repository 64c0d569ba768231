#include "distributed/store.h"

#include <utility>

#include "tensor/error.h"

namespace kiln::distributed {

void Store::set(const std::string& key, const std::string& value) {
  set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string Store::get_string(const std::string& key) {
  const std::vector<uint8_t> value = get(key);
  return std::string(value.begin(), value.end());
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : Store(base ? base->timeout() : kDefaultTimeout), prefix_(std::move(prefix)), base_(std::move(base)) {
  KILN_CHECK(base_ != nullptr, "PrefixStore('", prefix_, "'): the base store is null");
}

std::vector<std::string> PrefixStore::keys(const std::vector<std::string>& ks) const {
  std::vector<std::string> out;
  out.reserve(ks.size());
  for (const std::string& k : ks) out.push_back(key(k));
  return out;
}

void PrefixStore::set(const std::string& k, const std::vector<uint8_t>& value) { base_->set(key(k), value); }

// The wait comes first so that this store's timeout, not the base's, bounds
// the get: a process group sets its own timeout on its PrefixStore.
std::vector<uint8_t> PrefixStore::get(const std::string& k) {
  base_->wait({key(k)}, timeout_);
  return base_->get(key(k));
}

int64_t PrefixStore::add(const std::string& k, int64_t delta) { return base_->add(key(k), delta); }

std::vector<uint8_t> PrefixStore::compare_set(const std::string& k, const std::vector<uint8_t>& expected,
                                              const std::vector<uint8_t>& desired) {
  return base_->compare_set(key(k), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& ks, std::chrono::milliseconds timeout) {
  base_->wait(keys(ks), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& ks) { return base_->check(keys(ks)); }

bool PrefixStore::delete_key(const std::string& k) { return base_->delete_key(key(k)); }

// Counts the base's keys, as PyTorch's PrefixStore does: the base cannot
// count by prefix, and callers use num_keys() only as a rough measure.
int64_t PrefixStore::num_keys() { return base_->num_keys(); }

std::unique_ptr<Store> PrefixStore::clone() const {
  auto copy = std::make_unique<PrefixStore>(prefix_, std::shared_ptr<Store>(base_->clone()));
  copy->set_timeout(timeout_);
  return copy;
}

std::string PrefixStore::describe() const { return base_->describe() + " (prefix '" + prefix_ + "')"; }

}  // namespace kiln::distributed
