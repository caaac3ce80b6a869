// Gives a container's spare room back once it has emptied to a small fraction of it, so a burst
// (100,000 comms opened and closed) does not keep its peak after it is gone. Amortised constant
// per erase: a shrink costs the survivors' count and happens only after the container lost at
// least 3/4 (vectors) or 7/8 (hash tables) of what it had room for. Invalidates iterators:
// never call it while the container is being iterated.
#pragma once

#include <cstddef>

namespace pact {

inline constexpr size_t kShrinkFloor = 1024;  // small containers keep their room

template <typename C>
void shrinkIfSparse(C& c) {
  if constexpr (requires { c.bucket_count(); c.rehash(0); }) {
    if (c.bucket_count() > kShrinkFloor && c.size() < c.bucket_count() / 8) c.rehash(0);
  } else {
    if (c.capacity() > kShrinkFloor && c.size() < c.capacity() / 4) c.shrink_to_fit();
  }
}

}  // namespace pact
