// Traffic classes and their service profiles (docs/traffic-classes.md).
//
// A Profile is what one class asks of the transport: the UCX service family, ordering, lanes,
// chunking, credits, deadline, retries, payload check, fabric QoS and what to do on a host
// without RDMA. It is written as comma-separated tokens, `key=value` or a shorthand
// (`rc`, `ud`, `ordered`, `unordered`), applied left to right on top of a base profile.
//
// ClassTable holds every class of the process, parsed once from PACT_TC_* by the config
// registry (Params::load): PACT_TC_DEFAULT on top of the built-in defaults, and each
// PACT_TC_<n> (NCCL trafficClass n) and PACT_TC_<NAME> (engine classes) on top of DEFAULT.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/checksum.h"
#include "common/status.h"

namespace pact {

enum class Service : uint8_t { kAuto, kRc, kUd };
enum class Order : uint8_t { kOrdered, kUnordered };
enum class Fallback : uint8_t { kTcp, kFail };
enum class Steer : uint8_t { kAdaptive, kRoundRobin };

const char* serviceName(Service s);
const char* orderName(Order o);
const char* fallbackName(Fallback f);
const char* steerName(Steer s);

// The two faces a class serves: NCCL comms (the plugin) and engine transfers.
enum class Face : uint8_t { kNccl, kEngine };
const char* faceName(Face f);

struct Profile {
  static constexpr int kMaxLanes = 16;
  static constexpr int kMaxPriority = 7;
  static constexpr int kMaxRetries = 100;
  static constexpr uint64_t kMinChunk = 4ull << 10;
  static constexpr uint64_t kMaxChunk = 1ull << 30;

  Service service = Service::kAuto;
  Order order = Order::kOrdered;
  int lanes = 1;                          // 1..16
  uint64_t chunk = 512ull << 10;          // power of two in [4K, 1G]
  uint64_t credits = 0;                   // bytes in flight per sender; 0 = unlimited, else >= chunk
  std::chrono::microseconds timeout{0};   // per-transfer deadline; 0 = none
  int retries = 0;                        // 0..100
  Verify verify = Verify::kNone;
  int tc = -1;                            // 0..255; -1 = UCX default
  int sl = -1;                            // 0..15;  -1 = UCX default
  Fallback fallback = Fallback::kTcp;
  Steer steer = Steer::kAdaptive;
  // Engine transfers of at most this many bytes (host memory) travel eagerly, in one message
  // with their offer (docs/engine.md, "Eager transfers"); 0 = never. The plugin ignores it.
  static constexpr uint64_t kMaxEager = 1ull << 20;
  uint64_t eager = 256ull << 10;
  // 0..7: to one peer, a class's pieces go to UCX before those of any class below it, and a
  // class below a busy one keeps at most one piece in flight (transport/priority.h).
  int priority = 0;

  bool operator==(const Profile&) const = default;

  // Applies text's tokens, left to right (a later token overrides an earlier one), on top of
  // base. On error the message is "'TOKEN': expected ALLOWED" (TOKEN as written, trimmed).
  // keys (may be null): each key the text sets (shorthands count as their key) with the token
  // that set it last, in first-seen order.
  static Result<Profile> parse(std::string_view text, const Profile& base,
                               std::vector<std::pair<std::string, std::string>>* keys = nullptr);
  static Result<Profile> parse(std::string_view text);  // on top of the built-in defaults
  // Canonical text of every key; parse(describe()) gives back the same profile.
  std::string describe() const;
};

// What a key does on one face; refused: the face cannot honour it (a class of that face that
// sets it is an error at init, with `what` as the reason).
struct FaceUse {
  bool refused = false;
  const char* what = "";
};

// One profile key, for --help, docs/params.md and pact-info's per-face view.
struct ProfileKeyInfo {
  const char* key;
  const char* allowed;
  const char* defaultValue;
  const char* doc;
  FaceUse nccl;    // on an NCCL comm
  FaceUse engine;  // on an engine transfer
  const FaceUse& on(Face f) const { return f == Face::kNccl ? nccl : engine; }
};
const ProfileKeyInfo* profileKey(std::string_view key);
const std::vector<ProfileKeyInfo>& profileKeys();
// The grammar in one paragraph (for --help and docs).
const char* profileGrammar();

// A size as text with the largest exact K/M/G suffix ("512K", "3M", "17").
std::string formatSize(uint64_t bytes);

class ClassTable {
 public:
  static constexpr int kMaxNcclClass = 255;
  static constexpr std::string_view kPrefix = "PACT_TC_";

  struct Entry {
    std::string name;      // "DEFAULT", "3", "KV"
    std::string variable;  // "PACT_TC_DEFAULT", "PACT_TC_3", "PACT_TC_KV"
    Profile profile;       // resolved
    bool set = false;      // the variable is present in the environment
    // The keys the variable's own text sets, with the token that set each (not inherited ones).
    std::vector<std::pair<std::string, std::string>> keys;
  };

  // Built-in defaults for every class.
  ClassTable();

  // Parses every PACT_TC_* entry of env (other names are ignored). The first malformed one is
  // the error: "invalid PACT_TC_1='lanes=0': 'lanes=0': expected an integer from 1 to 16";
  // an unknown class name: "invalid PACT_TC_FOO='rc': 'FOO': expected DEFAULT, ...".
  static Result<ClassTable> load(const std::map<std::string, std::string>& env);

  const Profile& defaultProfile() const { return default_; }
  // NCCL's trafficClass: -1 (unset) or a class without PACT_TC_<n> resolves to DEFAULT.
  const Profile& forNccl(int trafficClass) const;
  // "DEFAULT" or an engine class name, any case ("KV", "kv"); any other name resolves to DEFAULT.
  const Profile& forName(std::string_view name) const;
  // Whether name (any case) is an engine class (KV, A2A, CTRL, CKPT).
  static bool isEngineClass(std::string_view name);
  // Whether classes of the table have different priorities (then send paths use priority gates).
  bool mixedPriorities() const;
  // Whether a class of this profile is below another class's priority: its send paths stand back
  // for higher classes (transport/priority.h) and its tcp socket buffer is bounded.
  bool yields(const Profile& p) const;
  // The class a name selects: an engine class's name in upper case ("kv" -> "KV"), else DEFAULT.
  static std::string canonicalName(std::string_view name);
  static const std::vector<std::string>& engineClassNames();

  // Every class: DEFAULT, each configured PACT_TC_<n> in ascending n, each engine class.
  std::vector<Entry> entries() const;
  // PACT_TC_DEFAULT's own keys that `face` cannot honour: the error that face's init fails with
  // ("invalid PACT_TC_DEFAULT='eager=64K': 'eager=64K': not on NCCL comms: ..."), or ok. Every
  // other variable serves one face and is checked by load().
  Status checkDefaultFor(Face face, Error* why) const;
  // The effective value of each PACT_TC_* registry row (see params.def), in registry order:
  // PACT_TC_DEFAULT, then each configured PACT_TC_<n> (or one "PACT_TC_<n>" row saying none is
  // set), then each engine class.
  std::vector<std::pair<std::string, std::string>> effective() const;

 private:
  Profile default_;
  std::map<int, Profile> nccl_;
  std::map<std::string, Profile, std::less<>> engine_;
  std::map<std::string, bool, std::less<>> set_;  // variable names present in env
  std::map<std::string, std::vector<std::pair<std::string, std::string>>, std::less<>> keys_;
  std::string defaultText_;  // PACT_TC_DEFAULT as set
};

}  // namespace pact
