// Ring<T>: a FIFO queue on one growing array. Unlike std::deque (which allocates and frees a
// block of nodes as the queue moves), it allocates only when it outgrows its capacity, so a
// queue the data path pushes and pops all day costs no heap operation once warm. A Ring holds no
// memory until its first push, and keeps its capacity after (clear() too). The capacity is a
// power of two (16, doubling), so an index wraps with a mask. Not thread-safe.
#pragma once

#include <cstddef>
#include <vector>

namespace pact::transport {

template <typename T>
class Ring {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  void push_back(T v) {
    if (size_ == slots_.size()) grow();
    slots_[at(size_)] = v;
    ++size_;
  }
  void pop_front() {
    head_ = at(1);
    --size_;
  }
  void clear() { head_ = size_ = 0; }
  // f(element) in FIFO order.
  template <typename F>
  void forEach(F&& f) {
    for (size_t i = 0; i < size_; ++i) f(slots_[at(i)]);
  }

 private:
  size_t at(size_t i) const { return (head_ + i) & (slots_.size() - 1); }  // the i-th from head
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = slots_[at(i)];
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace pact::transport
