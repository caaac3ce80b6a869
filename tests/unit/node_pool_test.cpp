// NodePool (a node container's nodes come back to the next insert) and FunctionRef (a call's
// callable, by reference, whatever it captures).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "common/function_ref.h"
#include "common/node_pool.h"

namespace pact {
namespace {

TEST(NodePool, AnErasedNodeIsTheNextOneInserted) {
  std::map<int, std::string, std::less<>, NodePool<std::pair<const int, std::string>>> m;
  m.emplace(1, "one");
  const void* first = &*m.find(1);
  m.erase(1);
  m.emplace(2, "two");
  EXPECT_EQ(static_cast<const void*>(&*m.find(2)), first) << "the freed node is reused";
  EXPECT_EQ(m.at(2), "two");
}

TEST(NodePool, ContainersKeepTheirValuesThroughChurn) {
  // More live nodes than one block (256), erased and inserted in a different order.
  std::unordered_map<int, int, std::hash<int>, std::equal_to<int>, NodePool<std::pair<const int, int>>> m;
  std::set<int, std::less<int>, NodePool<int>> s;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 1000; ++i) {
      m[i * 7 + round] = i;
      s.insert(i * 7 + round);
    }
    for (int i = 0; i < 1000; ++i) {
      ASSERT_EQ(m.at(i * 7 + round), i);
      ASSERT_EQ(s.count(i * 7 + round), 1u);
    }
    for (int i = 999; i >= 0; --i) {
      m.erase(i * 7 + round);
      s.erase(i * 7 + round);
    }
    EXPECT_TRUE(m.empty());
    EXPECT_TRUE(s.empty());
  }
}

int callTwice(FunctionRef<int(int)> f) { return f(1) + f(2); }

TEST(FunctionRef, CallsTheCallableItRefersTo) {
  int calls = 0;
  const std::string big(100, 'x');  // a capture larger than any small-buffer optimisation
  auto f = [&calls, big, a = 1L, b = 2L, c = 3L](int x) {
    ++calls;
    return x + static_cast<int>(big.size() + a + b + c);
  };
  EXPECT_EQ(callTwice(f), 1 + 106 + 2 + 106);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace pact
