// Gives a container's spare room back once it has emptied to a small fraction of it, so a burst
// (100,000 comms opened and closed) does not keep its peak after it is gone. A shrink happens
// once the container holds at most 1/64 of what it has room for, so it costs the survivors'
// count (amortised constant per erase) and allocates at most 1/64 of the peak. That bound
// matters: the erases often run on a background thread (the reaper), whose glibc arena never
// hands its top back to the system (malloc_trim trims only the main arena's top), so a
// shrink there that allocated a sizeable new table would leave that much resident for good.
// Invalidates iterators: never call it while the container is being iterated.
#pragma once

#include <cstddef>

namespace pact {

inline constexpr size_t kShrinkFloor = 1024;  // small containers keep their room
inline constexpr size_t kShrinkRatio = 64;    // room kept at most this many times the contents

template <typename C>
void shrinkIfSparse(C& c) {
  if constexpr (requires { c.bucket_count(); c.rehash(0); }) {
    if (c.bucket_count() > kShrinkFloor && c.size() <= c.bucket_count() / kShrinkRatio) c.rehash(0);
  } else {
    if (c.capacity() > kShrinkFloor && c.size() <= c.capacity() / kShrinkRatio) c.shrink_to_fit();
  }
}

}  // namespace pact
