// Service profiles and the PACT_TC_* class table: every valid form with its resolved fields,
// every malformed one with its exact message, inheritance and the registry integration.
#include <gtest/gtest.h>

#include <ostream>

#include "transport/params.h"
#include "transport/profile.h"

namespace pact {

void PrintTo(const Profile& p, std::ostream* os) { *os << p.describe(); }

namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

struct Good {
  const char* text;
  Profile expected;
};

class ProfileGood : public ::testing::TestWithParam<Good> {};

TEST_P(ProfileGood, ParsesToTheExpectedFields) {
  auto p = Profile::parse(GetParam().text);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(*p, GetParam().expected);
  // describe() is canonical: it parses back to the same profile.
  auto again = Profile::parse(p->describe());
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(*again, *p);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ProfileGood,
    ::testing::Values(
        Good{"rc", Profile{.service = Service::kRc}},
        Good{"ud", Profile{.service = Service::kUd}},
        Good{"ordered", Profile{.order = Order::kOrdered}},
        Good{"unordered", Profile{.order = Order::kUnordered}},
        Good{"service=auto", Profile{}},
        Good{"service=ud,order=unordered,lanes=4,chunk=512K",
             Profile{.service = Service::kUd, .order = Order::kUnordered, .lanes = 4}},
        Good{"service=rc,order=unordered,credits=256M,timeout=200ms,retries=3,verify=crc32c",
             Profile{.service = Service::kRc, .order = Order::kUnordered, .credits = 256ull << 20,
                     .timeout = milliseconds(200), .retries = 3, .verify = Verify::kCrc32c}},
        Good{" lanes = 16 , chunk=1G ", Profile{.lanes = 16, .chunk = 1ull << 30}},
        Good{"chunk=4k", Profile{.chunk = 4096}},
        Good{"chunk=4096", Profile{.chunk = 4096}},
        Good{"chunk=1M,credits=1M", Profile{.chunk = 1ull << 20, .credits = 1ull << 20}},
        Good{"credits=0,chunk=1G", Profile{.chunk = 1ull << 30}},
        Good{"credits=3G", Profile{.credits = 3ull << 30}},
        Good{"timeout=0", Profile{}},
        Good{"timeout=1s", Profile{.timeout = std::chrono::seconds(1)}},
        Good{"timeout=250us", Profile{.timeout = microseconds(250)}},
        Good{"retries=0", Profile{}},
        Good{"retries=100", Profile{.retries = 100}},
        Good{"verify=xxh3", Profile{.verify = Verify::kXxh3}},
        Good{"verify=none", Profile{}},
        Good{"tc=0,sl=15", Profile{.tc = 0, .sl = 15}},
        Good{"tc=255", Profile{.tc = 255}},
        Good{"tc=default,sl=default", Profile{}},
        Good{"fallback=fail", Profile{.fallback = Fallback::kFail}},
        Good{"fallback=tcp", Profile{}},
        Good{"steer=roundrobin", Profile{.steer = Steer::kRoundRobin}},
        Good{"steer=adaptive", Profile{}},
        Good{"eager=0", Profile{.eager = 0}},
        Good{"eager=1M", Profile{.eager = 1 << 20}},
        Good{"eager=256K", Profile{}},
        Good{"rc,ud", Profile{.service = Service::kUd}},        // a later token wins
        Good{"lanes=2,lanes=8", Profile{.lanes = 8}},
        Good{"unordered,order=ordered", Profile{}}));

struct Bad {
  const char* variable;
  const char* value;
  const char* message;
};

class ProfileBad : public ::testing::TestWithParam<Bad> {};

TEST_P(ProfileBad, OneLineNamesVariableTokenAndAllowed) {
  const Bad& b = GetParam();
  auto t = ClassTable::load({{b.variable, b.value}});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status(), Status::kInvalidArgument);
  EXPECT_EQ(t.error().message, b.message);
  // The registry fails the same way (this is what fails plugin init and pact-info).
  auto p = Params::load({{b.variable, b.value}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message, b.message);
}

#define KEYS                                                                                    \
  "expected key=value with key service, order, lanes, chunk, credits, timeout, retries, verify, " \
  "tc, sl, fallback, steer, eager or priority, or one of rc, ud, ordered, unordered"
#define CLASSES "expected a class DEFAULT, KV, A2A, CTRL, CKPT or a number from 0 to 255"

INSTANTIATE_TEST_SUITE_P(
    Table, ProfileBad,
    ::testing::Values(
        Bad{"PACT_TC_1", "lanes=0",
            "invalid PACT_TC_1='lanes=0': 'lanes=0': expected an integer from 1 to 16"},
        Bad{"PACT_TC_1", "rc,lanes=17",
            "invalid PACT_TC_1='rc,lanes=17': 'lanes=17': expected an integer from 1 to 16"},
        Bad{"PACT_TC_1", "lanes=two",
            "invalid PACT_TC_1='lanes=two': 'lanes=two': expected an integer from 1 to 16"},
        Bad{"PACT_TC_1", "lanes=",
            "invalid PACT_TC_1='lanes=': 'lanes=': expected an integer from 1 to 16"},
        Bad{"PACT_TC_1", "chunk=3K",
            "invalid PACT_TC_1='chunk=3K': 'chunk=3K': expected a power of two from 4K to 1G"},
        Bad{"PACT_TC_1", "chunk=2K",
            "invalid PACT_TC_1='chunk=2K': 'chunk=2K': expected a power of two from 4K to 1G"},
        Bad{"PACT_TC_1", "chunk=2G",
            "invalid PACT_TC_1='chunk=2G': 'chunk=2G': expected a power of two from 4K to 1G"},
        Bad{"PACT_TC_1", "chunk=1T",
            "invalid PACT_TC_1='chunk=1T': 'chunk=1T': expected a power of two from 4K to 1G"},
        Bad{"PACT_TC_KV", "credits=64K",
            "invalid PACT_TC_KV='credits=64K': 'credits=64K': expected 0 (unlimited) or a size of "
            "at least chunk (512K)"},
        Bad{"PACT_TC_KV", "credits=1M,chunk=2M",
            "invalid PACT_TC_KV='credits=1M,chunk=2M': 'chunk=2M': expected a power of two from "
            "4K to 1G, at most credits (1M)"},
        Bad{"PACT_TC_KV", "credits=lots",
            "invalid PACT_TC_KV='credits=lots': 'credits=lots': expected 0 (unlimited) or a size "
            "of at least chunk"},
        Bad{"PACT_TC_KV", "timeout=5",
            "invalid PACT_TC_KV='timeout=5': 'timeout=5': expected 0 (none) or a duration with "
            "unit us, ms or s"},
        Bad{"PACT_TC_KV", "timeout=-1ms",
            "invalid PACT_TC_KV='timeout=-1ms': 'timeout=-1ms': expected 0 (none) or a duration "
            "with unit us, ms or s"},
        Bad{"PACT_TC_KV", "retries=101",
            "invalid PACT_TC_KV='retries=101': 'retries=101': expected an integer from 0 to 100"},
        Bad{"PACT_TC_KV", "verify=md5",
            "invalid PACT_TC_KV='verify=md5': 'verify=md5': expected none, crc32c or xxh3"},
        Bad{"PACT_TC_2", "tc=256",
            "invalid PACT_TC_2='tc=256': 'tc=256': expected an integer from 0 to 255, or default"},
        Bad{"PACT_TC_2", "tc=-1",
            "invalid PACT_TC_2='tc=-1': 'tc=-1': expected an integer from 0 to 255, or default"},
        Bad{"PACT_TC_2", "sl=16",
            "invalid PACT_TC_2='sl=16': 'sl=16': expected an integer from 0 to 15, or default"},
        Bad{"PACT_TC_2", "fallback=ib",
            "invalid PACT_TC_2='fallback=ib': 'fallback=ib': expected tcp or fail"},
        Bad{"PACT_TC_2", "steer=random",
            "invalid PACT_TC_2='steer=random': 'steer=random': expected adaptive or roundrobin"},
        Bad{"PACT_TC_2", "service=dc",
            "invalid PACT_TC_2='service=dc': 'service=dc': expected rc, ud or auto"},
        Bad{"PACT_TC_2", "order=fifo",
            "invalid PACT_TC_2='order=fifo': 'order=fifo': expected ordered or unordered"},
        Bad{"PACT_TC_DEFAULT", "speed=fast",
            "invalid PACT_TC_DEFAULT='speed=fast': 'speed=fast': " KEYS},
        Bad{"PACT_TC_DEFAULT", "RC", "invalid PACT_TC_DEFAULT='RC': 'RC': " KEYS},
        Bad{"PACT_TC_DEFAULT", "lanes", "invalid PACT_TC_DEFAULT='lanes': 'lanes': " KEYS},
        Bad{"PACT_TC_DEFAULT", "", "invalid PACT_TC_DEFAULT='': '': " KEYS},
        Bad{"PACT_TC_DEFAULT", "rc,,lanes=2", "invalid PACT_TC_DEFAULT='rc,,lanes=2': '': " KEYS},
        Bad{"PACT_TC_DEFAULT", "rc,", "invalid PACT_TC_DEFAULT='rc,': '': " KEYS},
        // Class names: an unknown one is an error, never a typo warning.
        Bad{"PACT_TC_FOO", "rc", "invalid PACT_TC_FOO='rc': 'FOO': " CLASSES},
        Bad{"PACT_TC_256", "rc", "invalid PACT_TC_256='rc': '256': " CLASSES},
        Bad{"PACT_TC_01", "rc", "invalid PACT_TC_01='rc': '01': " CLASSES},
        Bad{"PACT_TC_-1", "rc", "invalid PACT_TC_-1='rc': '-1': " CLASSES},
        Bad{"PACT_TC_kv", "rc", "invalid PACT_TC_kv='rc': 'kv': " CLASSES},
        Bad{"PACT_TC_", "rc", "invalid PACT_TC_='rc': '': " CLASSES},
        Bad{"PACT_TC_KV", "eager=2M",
            "invalid PACT_TC_KV='eager=2M': 'eager=2M': expected 0 (never) or a size up to 1M"},
        Bad{"PACT_TC_KV", "eager=big",
            "invalid PACT_TC_KV='eager=big': 'eager=big': expected 0 (never) or a size up to 1M"}));

TEST(ClassTable, BuiltInDefaults) {
  ClassTable t;
  const Profile& d = t.defaultProfile();
  EXPECT_EQ(d.service, Service::kAuto);
  EXPECT_EQ(d.order, Order::kOrdered);
  EXPECT_EQ(d.lanes, 1);
  EXPECT_EQ(d.chunk, 512u << 10);
  EXPECT_EQ(d.credits, 0u);
  EXPECT_EQ(d.timeout, microseconds(0));
  EXPECT_EQ(d.retries, 0);
  EXPECT_EQ(d.verify, Verify::kNone);
  EXPECT_EQ(d.tc, -1);
  EXPECT_EQ(d.sl, -1);
  EXPECT_EQ(d.fallback, Fallback::kTcp);
  EXPECT_EQ(d.steer, Steer::kAdaptive);
  EXPECT_EQ(d.describe(),
            "service=auto,order=ordered,lanes=1,chunk=512K,credits=0,timeout=0,retries=0,"
            "verify=none,tc=default,sl=default,fallback=tcp,steer=adaptive,eager=256K,priority=0");
  EXPECT_EQ(t.forNccl(-1), d);
  EXPECT_EQ(t.forName("KV"), d);
}

TEST(ClassTable, ClassesInheritFromDefault) {
  auto t = ClassTable::load({{"PACT_TC_DEFAULT", "ud,lanes=4,tc=5,credits=2M"},
                             {"PACT_TC_3", "unordered,tc=default"},
                             {"PACT_TC_KV", "rc,verify=crc32c"},
                             {"PACT_EPOCH", "7"}});  // not a class: ignored here
  ASSERT_TRUE(t.ok()) << t.error().message;
  const Profile def{.service = Service::kUd, .lanes = 4, .credits = 2ull << 20, .tc = 5};
  EXPECT_EQ(t->defaultProfile(), def);
  Profile three = def;
  three.order = Order::kUnordered;
  three.tc = -1;
  EXPECT_EQ(t->forNccl(3), three);
  Profile kv = def;
  kv.service = Service::kRc;
  kv.verify = Verify::kCrc32c;
  EXPECT_EQ(t->forName("KV"), kv);
  EXPECT_EQ(t->forName("kv"), kv);
  // -1, an unconfigured class, and anything out of range resolve to DEFAULT.
  EXPECT_EQ(t->forNccl(-1), def);
  EXPECT_EQ(t->forNccl(4), def);
  EXPECT_EQ(t->forNccl(1000), def);
  EXPECT_EQ(t->forName("A2A"), def);
  EXPECT_EQ(t->forName("DEFAULT"), def);
  EXPECT_EQ(t->forName("nope"), def);
  EXPECT_TRUE(ClassTable::isEngineClass("ckpt"));
  EXPECT_FALSE(ClassTable::isEngineClass("DEFAULT"));
  EXPECT_EQ(ClassTable::engineClassNames(), (std::vector<std::string>{"KV", "A2A", "CTRL", "CKPT"}));
}

TEST(ClassTable, CreditsAgainstAnInheritedChunkBlameTheClassVariable) {
  auto t = ClassTable::load({{"PACT_TC_DEFAULT", "credits=1M"}, {"PACT_TC_2", "lanes=2,chunk=2M"}});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().message,
            "invalid PACT_TC_2='lanes=2,chunk=2M': 'chunk=2M': expected a power of two from 4K "
            "to 1G, at most credits (1M)");
  EXPECT_TRUE(ClassTable::load({{"PACT_TC_DEFAULT", "credits=1M"}, {"PACT_TC_2", "credits=0,chunk=2M"}}).ok());
}

TEST(ClassTable, ABadDefaultIsReportedFirst) {
  auto t = ClassTable::load({{"PACT_TC_1", "lanes=0"}, {"PACT_TC_DEFAULT", "lanes=99"}});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().message,
            "invalid PACT_TC_DEFAULT='lanes=99': 'lanes=99': expected an integer from 1 to 16");
}

TEST(ClassTable, EntriesListEveryClassWithWhetherItWasSet) {
  auto t = ClassTable::load({{"PACT_TC_12", "rc"}, {"PACT_TC_5", "ud"}, {"PACT_TC_CTRL", "lanes=2"}});
  ASSERT_TRUE(t.ok()) << t.error().message;
  std::vector<std::string> names, vars;
  std::vector<bool> set;
  for (const auto& e : t->entries()) {
    names.push_back(e.name);
    vars.push_back(e.variable);
    set.push_back(e.set);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"DEFAULT", "5", "12", "KV", "A2A", "CTRL", "CKPT"}));
  EXPECT_EQ(vars[1], "PACT_TC_5");
  EXPECT_EQ(set, (std::vector<bool>{false, true, true, false, false, true, false}));
  EXPECT_EQ(t->entries()[2].profile.service, Service::kRc);
}

TEST(ParamsClasses, PactTcNamesAreNeverTypoWarnings) {
  std::vector<std::string> unknown;
  auto p = Params::load({{"PACT_TC_1", "rc"}, {"PACT_TC_KV", "ud"}, {"PACT_TCX", "1"},
                         {"PACT_TC", "rc"}},
                        &unknown);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(unknown, (std::vector<std::string>{"PACT_TC", "PACT_TCX"}));
  EXPECT_EQ(p->classes.forNccl(1).service, Service::kRc);
  EXPECT_EQ(p->classes.forName("KV").service, Service::kUd);
}

TEST(ParamsClasses, EffectiveListsEachClassVariable) {
  auto none = Params::load({});
  ASSERT_TRUE(none.ok());
  const std::string builtin = Profile{}.describe();
  const auto all = none->effective();
  std::vector<std::pair<std::string, std::string>> tail(all.end() - 6, all.end());
  EXPECT_EQ(tail, (std::vector<std::pair<std::string, std::string>>{
                      {"PACT_TC_DEFAULT", builtin},
                      {"PACT_TC_<n>", "none set (every NCCL traffic class uses PACT_TC_DEFAULT)"},
                      {"PACT_TC_KV", builtin},
                      {"PACT_TC_A2A", builtin},
                      {"PACT_TC_CTRL", builtin},
                      {"PACT_TC_CKPT", builtin}}));

  auto p = Params::load({{"PACT_TC_DEFAULT", "lanes=2"}, {"PACT_TC_12", "rc"}, {"PACT_TC_5", "ud"}});
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto eff = p->effective();
  ASSERT_EQ(eff.size(), Params::table().size() + 1);  // the <n> row became two variables
  std::vector<std::string> names;
  for (const auto& [k, v] : eff) names.push_back(k);
  std::vector<std::string> expectedTail = {"PACT_TC_DEFAULT", "PACT_TC_5",   "PACT_TC_12", "PACT_TC_KV",
                                           "PACT_TC_A2A",     "PACT_TC_CTRL", "PACT_TC_CKPT"};
  EXPECT_EQ(std::vector<std::string>(names.end() - 7, names.end()), expectedTail);
  EXPECT_EQ(eff[eff.size() - 6].second, "service=ud,order=ordered,lanes=2,chunk=512K,credits=0,"
                                        "timeout=0,retries=0,verify=none,tc=default,sl=default,"
                                        "fallback=tcp,steer=adaptive,eager=256K,priority=0");
}

TEST(ParamsClasses, TableDocumentsTheFamilyAndMarkdownEveryKey) {
  std::vector<std::string> names;
  for (const auto& info : Params::table()) names.push_back(info.name);
  for (const char* n : {"PACT_TC_DEFAULT", "PACT_TC_<n>", "PACT_TC_KV", "PACT_TC_A2A",
                        "PACT_TC_CTRL", "PACT_TC_CKPT"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_EQ(profileKeys().size(), 14u);
  const std::string md = Params::markdown();
  const std::string help = Params::profileHelp();
  for (const auto& k : profileKeys()) {
    EXPECT_NE(md.find(std::string("| `") + k.key + "` |"), std::string::npos) << k.key;
    EXPECT_NE(help.find(std::string("  ") + k.key + " (default"), std::string::npos) << k.key;
  }
}

// No silent keys: a key a face cannot honour is refused for a class of that face, with one line
// naming the variable, the token and why; PACT_TC_DEFAULT (the base of both faces) is checked
// by each face's init.
TEST(ClassTable, AKeyTheFaceCannotHonourIsRefused) {
  auto nccl = ClassTable::load({{"PACT_TC_3", "unordered,eager=64K"}});
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.error().message,
            "invalid PACT_TC_3='unordered,eager=64K': 'eager=64K': not on NCCL comms: eager applies to "
            "engine transfers only (NCCL's own protocols decide how its messages travel); set it on "
            "PACT_TC_KV, _A2A, _CTRL or _CKPT");
  // The same key on an engine class, and in DEFAULT, loads: DEFAULT is the engine's base too.
  auto t = ClassTable::load({{"PACT_TC_KV", "eager=64K"}, {"PACT_TC_DEFAULT", "rc,eager=128K,priority=2"}});
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->forName("KV").eager, 64u << 10);
  EXPECT_EQ(t->forNccl(5).priority, 2);
  Error why;
  EXPECT_EQ(t->checkDefaultFor(Face::kEngine, &why), Status::kOk);
  ASSERT_EQ(t->checkDefaultFor(Face::kNccl, &why), Status::kInvalidArgument);
  EXPECT_EQ(why.message.rfind("invalid PACT_TC_DEFAULT='rc,eager=128K,priority=2': 'eager=128K': not on NCCL comms: ", 0), 0u)
      << why.message;
  // Every other key applies on both faces.
  for (const auto& k : profileKeys()) {
    EXPECT_FALSE(k.engine.refused) << k.key;
    EXPECT_EQ(k.nccl.refused, std::string(k.key) == "eager") << k.key;
    EXPECT_STRNE(k.nccl.what, "") << k.key;
    EXPECT_STRNE(k.engine.what, "") << k.key;
  }
  // The keys a variable's own text sets, shorthands as their key, the last token of each.
  const auto entries = ClassTable::load({{"PACT_TC_7", "rc,lanes=2,unordered,lanes=4"}})->entries();
  const auto e7 = std::find_if(entries.begin(), entries.end(), [](const auto& e) { return e.name == "7"; });
  ASSERT_NE(e7, entries.end());
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"service", "rc"}, {"lanes", "lanes=4"}, {"order", "unordered"}};
  EXPECT_EQ(e7->keys, keys);
}

TEST(Profile, PriorityIsZeroToSeven) {
  EXPECT_EQ(Profile::parse("priority=7")->priority, 7);
  EXPECT_FALSE(Profile::parse("priority=8").ok());
  EXPECT_EQ(Profile::parse("priority=8").error().message, "'priority=8': expected an integer from 0 to 7");
}

TEST(FormatSize, LargestExactSuffix) {
  EXPECT_EQ(formatSize(0), "0");
  EXPECT_EQ(formatSize(17), "17");
  EXPECT_EQ(formatSize(4096), "4K");
  EXPECT_EQ(formatSize(3ull << 20), "3M");
  EXPECT_EQ(formatSize(1536ull << 20), "1536M");
  EXPECT_EQ(formatSize(2ull << 30), "2G");
}

}  // namespace
}  // namespace pact
