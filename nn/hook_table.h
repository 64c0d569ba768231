// The hooks of one module (nn/module.h), kept apart from Module so that
// module.cpp and state_dict.cpp share it without every layer seeing it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace kiln::nn {

template <class Hook>
using HookList = std::vector<std::pair<uint64_t, Hook>>;

struct HookTable {
  uint64_t next_id = 1;
  HookList<ForwardPreHook> forward_pre;
  HookList<ForwardHook> forward;
  HookList<BackwardPreHook> backward_pre;
  HookList<BackwardHook> backward;
  HookList<StateDictPreHook> state_dict_pre;
  HookList<StateDictHook> state_dict;
  HookList<LoadStateDictPreHook> load_state_dict_pre;
  HookList<LoadStateDictHook> load_state_dict_post;

  template <class Hook>
  uint64_t add(HookList<Hook>& list, Hook hook) {
    uint64_t id = next_id++;
    list.emplace_back(id, std::move(hook));
    return id;
  }
  void remove(uint64_t id) {
    auto drop = [id](auto& list) { std::erase_if(list, [id](const auto& entry) { return entry.first == id; }); };
    drop(forward_pre);
    drop(forward);
    drop(backward_pre);
    drop(backward);
    drop(state_dict_pre);
    drop(state_dict);
    drop(load_state_dict_pre);
    drop(load_state_dict_post);
  }
};

}  // namespace kiln::nn
