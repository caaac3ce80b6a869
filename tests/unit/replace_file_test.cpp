// expandFileName: %p is the process id, %h the host name, %% a percent sign; anything else stays.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>

#include "common/replace_file.h"

namespace pact {
namespace {

TEST(ExpandFileName, ProcessIdHostAndPercent) {
  char host[256] = "";
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string pid = std::to_string(::getpid());
  EXPECT_EQ(expandFileName("/tmp/t-%p.json"), "/tmp/t-" + pid + ".json");
  EXPECT_EQ(expandFileName("%h/%p"), std::string(host) + "/" + pid);
  EXPECT_EQ(expandFileName("100%%-%x%"), "100%-%x%") << "%% is one %, an unknown or last % stays";
  EXPECT_EQ(expandFileName("plain"), "plain");
}

}  // namespace
}  // namespace pact
