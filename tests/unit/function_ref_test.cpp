// FunctionRef: a call's callable, by reference, whatever it captures.
#include <gtest/gtest.h>

#include <string>

#include "common/function_ref.h"

namespace pact {
namespace {

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
