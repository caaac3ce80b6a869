// NodePool: an allocator for node containers (std::map, std::multimap, std::set, the nodes of the
// unordered ones) that keeps the nodes it has handed out: a node given back goes on a free list of
// its size and the next insert takes it, so a container that churns at a steady size allocates
// nothing once warm. Nodes are carved from blocks of 256; blocks are kept for the life
// of the process (a peak of nodes stays reserved). Requests for more than one object (the bucket
// arrays of unordered containers) go to operator new. Thread-safe (one mutex per node size).
#pragma once

#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

namespace pact {

namespace detail {
template <size_t kSize, size_t kAlign>
class NodeFreeList {
 public:
  static NodeFreeList& get() {
    static NodeFreeList* list = new NodeFreeList();  // immortal: containers of statics outlive it otherwise
    return *list;
  }
  void* take() {
    std::lock_guard lock(mu_);
    if (free_ == nullptr) grow();
    Slot* s = free_;
    free_ = s->next;
    return s;
  }
  void give(void* p) {
    std::lock_guard lock(mu_);
    auto* s = static_cast<Slot*>(p);
    s->next = free_;
    free_ = s;
  }

 private:
  static constexpr size_t kNodesPerBlock = 256;
  union Slot {
    Slot* next;
    alignas(kAlign) unsigned char bytes[kSize];
  };
  void grow() {
    blocks_.push_back(new Slot[kNodesPerBlock]);
    for (size_t i = 0; i < kNodesPerBlock; ++i) {
      blocks_.back()[i].next = free_;
      free_ = &blocks_.back()[i];
    }
  }
  std::mutex mu_;
  Slot* free_ = nullptr;
  std::vector<Slot*> blocks_;
};
}  // namespace detail

template <typename T>
struct NodePool {
  using value_type = T;
  NodePool() noexcept = default;
  template <typename U>
  NodePool(const NodePool<U>&) noexcept {}  // NOLINT: rebinding, as allocators convert
  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(detail::NodeFreeList<sizeof(T), alignof(T)>::get().take());
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n == 1)
      detail::NodeFreeList<sizeof(T), alignof(T)>::get().give(p);
    else
      ::operator delete(p, std::align_val_t(alignof(T)));
  }
  template <typename U>
  bool operator==(const NodePool<U>&) const noexcept { return true; }
};

}  // namespace pact
