// Slab<T>: the data path's objects of one kind (in-flight piece operations, control message
// buffers), taken and given back without touching the heap once the slab has grown to the
// working set. Grows by chunks of 64 and shrinks only by trim() with nothing taken; an object's
// address is stable until then, so UCX may hold it. take() hands out a default-constructed or a given-back object
// (the caller resets what it uses). Not thread-safe: the owner's lock.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace pact::transport {

template <typename T>
class Slab {
 public:
  static constexpr size_t kChunk = 64;

  T* take() {
    if (free_.empty()) grow();
    T* t = free_.back();
    free_.pop_back();
    ++live_;
    return t;
  }
  void give(T* t) {
    free_.push_back(t);
    --live_;
  }
  size_t live() const { return live_; }       // taken and not given back
  size_t capacity() const { return chunks_.size() * kChunk; }
  // f(object) for every object of the slab, taken or not.
  template <typename F>
  void forEach(F&& f) {
    for (auto& c : chunks_)
      for (size_t i = 0; i < kChunk; ++i) f(c[i]);
  }
  // Gives the memory back when nothing is taken (after a burst grew the slab); whether it did.
  bool trim() {
    if (live_ != 0) return false;
    free_.clear();
    free_.shrink_to_fit();
    chunks_.clear();
    chunks_.shrink_to_fit();
    return true;
  }

 private:
  void grow() {
    chunks_.push_back(std::make_unique<T[]>(kChunk));
    free_.reserve(capacity());
    for (size_t i = kChunk; i > 0; --i) free_.push_back(&chunks_.back()[i - 1]);
  }

  std::vector<std::unique_ptr<T[]>> chunks_;
  std::vector<T*> free_;
  size_t live_ = 0;
};

}  // namespace pact::transport
