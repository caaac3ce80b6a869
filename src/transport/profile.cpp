#include "transport/profile.h"

#include <algorithm>
#include <bit>
#include <cctype>

#include "common/parse.h"

namespace pact {

namespace {

std::string_view trim(std::string_view s) { return trimSpace(s); }

std::string formatQos(int v) { return v < 0 ? "default" : std::to_string(v); }

// Parses one of names (index = enum value) into *out.
template <typename E, size_t N>
bool parseEnum(std::string_view v, const char* const (&names)[N], E* out) {
  for (size_t i = 0; i < N; ++i)
    if (v == names[i]) {
      *out = static_cast<E>(i);
      return true;
    }
  return false;
}

bool parseInt(std::string_view v, int lo, int hi, int* out) {
  auto n = parseUnsigned(v);
  if (!n.ok() || *n < static_cast<uint64_t>(lo) || *n > static_cast<uint64_t>(hi)) return false;
  *out = static_cast<int>(*n);
  return true;
}

bool parseQos(std::string_view v, int hi, int* out) {
  if (v == "default") {
    *out = -1;
    return true;
  }
  return parseInt(v, 0, hi, out);
}

constexpr const char* kServiceNames[] = {"auto", "rc", "ud"};
constexpr const char* kOrderNames[] = {"ordered", "unordered"};
constexpr const char* kFallbackNames[] = {"tcp", "fail"};
constexpr const char* kSteerNames[] = {"adaptive", "roundrobin"};

constexpr const char* kChunkAllowed = "a power of two from 4K to 1G";
constexpr const char* kCreditsAllowed = "0 (unlimited) or a size of at least chunk";

// The one table of profile keys: documentation and how each value is applied.
struct KeyDef {
  ProfileKeyInfo info;
  bool (*apply)(std::string_view value, Profile& p);
};

const std::vector<KeyDef>& keyDefs() {
  static const std::vector<KeyDef> defs = {
      {{"service", "rc, ud or auto", "auto",
        "UCX transport family: rc = reliable connected (UCX rc alias), ud = datagram (UCX ud "
        "alias), auto = UCX chooses. Shorthands: rc, ud.",
        {false, "the UCX transports of the class's context (one UCP context per distinct setting)"},
        {false, "the UCX transports of the class's context (one UCP context per distinct setting)"}},
       [](std::string_view v, Profile& p) { return parseEnum(v, kServiceNames, &p.service); }},
      {{"order", "ordered or unordered", "ordered",
        "ordered: messages complete in posting order over one lane. unordered: messages are cut "
        "into chunks spread over the lanes and complete in any order. Shorthands: ordered, "
        "unordered.",
        {false, "ordered: one lane, receives reported in posting order; unordered: each message cut into chunks over the lanes"},
        {false, "ordered: one lane; unordered: a transfer's pieces spread over the lanes"}},
       [](std::string_view v, Profile& p) { return parseEnum(v, kOrderNames, &p.order); }},
      {{"lanes", "an integer from 1 to 16", "1", "Paths per connection (unordered classes).",
        {false, "UCX endpoints a send comm stripes over (unordered; one per rail of a virtual device)"},
        {false, "UCX endpoints a route to a peer stripes over (unordered)"}},
       [](std::string_view v, Profile& p) { return parseInt(v, 1, Profile::kMaxLanes, &p.lanes); }},
      {{"chunk", kChunkAllowed, "512K", "Stripe unit of unordered classes (K, M, G suffixes).",
        {false, "the piece size of an unordered comm's messages"},
        {false, "the piece size of a transfer"}},
       [](std::string_view v, Profile& p) {
         auto n = SizeParser::parse(v);
         if (!n.ok() || *n < Profile::kMinChunk || *n > Profile::kMaxChunk ||
             !std::has_single_bit(*n))
           return false;
         p.chunk = *n;
         return true;
       }},
      {{"credits", kCreditsAllowed, "0",
        "Bytes in flight: on NCCL comms the sending process's budget per peer process, over all "
        "the class's comms to it; on the engine the receiver-granted budget per sender. 0 = "
        "unlimited (K, M, G suffixes).",
        {false, "bytes of the class's sends handed to UCX and not yet completed, per peer process over all the class's comms to it; beyond it isend returns a NULL request (NCCL retries)"},
        {false, "receiver-granted bytes in flight per sender, when the application set no budget"}},
       [](std::string_view v, Profile& p) {
         auto n = SizeParser::parse(v);
         if (!n.ok()) return false;
         p.credits = *n;
         return true;
       }},
      {{"timeout", "0 (none) or a duration with unit us, ms or s", "0",
        "Deadline of a message (NCCL comms: from its first landed bytes; engine: per transfer); "
        "0 = none.",
        {false, "a message whose first bytes landed must be complete (re-sends included) within it, else its comm fails with ncclRemoteError"},
        {false, "per-transfer deadline from the send"}},
       [](std::string_view v, Profile& p) {
         if (v == "0") {
           p.timeout = std::chrono::microseconds(0);
           return true;
         }
         auto d = DurationParser::parse(v);
         if (!d.ok()) return false;
         p.timeout = *d;
         return true;
       }},
      {{"retries", "an integer from 0 to 100", "0", "Retry budget per message or transfer.",
        {false, "times a piece whose checksum did not match (or whose attempt was lost) is sent again"},
        {false, "attempts of a transfer after the first"}},
       [](std::string_view v, Profile& p) {
         return parseInt(v, 0, Profile::kMaxRetries, &p.retries);
       }},
      {{"verify", "none, crc32c or xxh3", "none",
        "Payload check: a receive (NCCL) or a commit (engine) only when the bytes' checksum "
        "matches the sender's.",
        {false, "test() reports a receive done only when each piece's checksum matched the sender's; a piece that did not is sent again"},
        {false, "the checksum of the blocks is checked before the commit"}},
       [](std::string_view v, Profile& p) { return parseEnum(v, kVerifyNames, &p.verify); }},
      {{"tc", "an integer from 0 to 255, or default", "default",
        "Fabric traffic class (RoCE/IB) of the class's UCX context (UCX_IB_TRAFFIC_CLASS); "
        "default = UCX's.",
        {false, "UCX_IB_TRAFFIC_CLASS of the class's context (RDMA devices)"},
        {false, "UCX_IB_TRAFFIC_CLASS of the class's context (RDMA devices)"}},
       [](std::string_view v, Profile& p) { return parseQos(v, 255, &p.tc); }},
      {{"sl", "an integer from 0 to 15, or default", "default",
        "InfiniBand service level of the class's UCX context (UCX_IB_SL); default = UCX's.",
        {false, "UCX_IB_SL of the class's context (RDMA devices)"},
        {false, "UCX_IB_SL of the class's context (RDMA devices)"}},
       [](std::string_view v, Profile& p) { return parseQos(v, 15, &p.sl); }},
      {{"fallback", "tcp or fail", "tcp",
        "On a device without the RDMA transport asked for: tcp = use TCP and shared memory with "
        "one warning, fail = init fails.",
        {false, "what plugin init does on a device without the asked RDMA transport"},
        {false, "what engine creation does on a device without the asked RDMA transport"}},
       [](std::string_view v, Profile& p) { return parseEnum(v, kFallbackNames, &p.fallback); }},
      {{"steer", "adaptive or roundrobin", "adaptive",
        "How the chunks of unordered classes are spread over the lanes: adaptive = where a chunk "
        "is expected to finish first (bytes in flight, measured throughput), roundrobin = in turn.",
        {false, "how an unordered comm's pieces are spread over its lanes"},
        {false, "how an unordered route's pieces are spread over its lanes"}},
       [](std::string_view v, Profile& p) { return parseEnum(v, kSteerNames, &p.steer); }},
      {{"eager", "0 (never) or a size up to 1M", "256K",
        "Engine transfers of at most this many bytes (host memory) go in one message with "
        "their offer: a receiver that expects them and has credit commits them on arrival, one "
        "round trip instead of two (K, M suffixes). Engine classes only.",
        {true, "eager applies to engine transfers only (NCCL's own protocols decide how its messages travel); set it on PACT_TC_KV, _A2A, _CTRL or _CKPT"},
        {false, "transfers up to this size travel with their offer"}},
       [](std::string_view v, Profile& p) {
         auto n = SizeParser::parse(v);
         if (!n.ok() || *n > Profile::kMaxEager) return false;
         p.eager = *n;
         return true;
       }},
      {{"priority", "an integer from 0 to 7", "0",
        "To one peer process, a class's pieces go to UCX before those of every class of lower "
        "priority, which hands UCX nothing new while a higher one has work to that peer (after "
        "20 ms of it, one piece per 10 ms); classes of different priority get UCX contexts "
        "(connections) of their own.",
        {false, "a send comm's pieces go to UCX before a lower class's to the same peer process; below a class with work it stands back"},
        {false, "a route's pieces go to UCX before a lower class's to the same peer process; below a class with work it stands back"}},
       [](std::string_view v, Profile& p) { return parseInt(v, 0, Profile::kMaxPriority, &p.priority); }},
  };
  return defs;
}

const std::string& tokenAllowed() {
  static const std::string text = [] {
    std::string keys;
    const auto& defs = keyDefs();
    for (size_t i = 0; i < defs.size(); ++i)
      keys += std::string(i == 0 ? "" : i + 1 == defs.size() ? " or " : ", ") + defs[i].info.key;
    return "key=value with key " + keys + ", or one of rc, ud, ordered, unordered";
  }();
  return text;
}

Error tokenError(std::string_view token, const std::string& allowed) {
  return Error{Status::kInvalidArgument, "'" + std::string(token) + "': expected " + allowed};
}

std::vector<std::string> registryClassSuffixes() {
  std::vector<std::string> out;
#define PACT_TC_CLASS(suffix, doc) out.emplace_back(suffix);
#include "transport/params.def"
#undef PACT_TC_CLASS
  return out;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// "0".."255" without leading zeros (so two variables never name one class).
bool parseNcclClass(std::string_view s, int* n) {
  if (s.empty() || s.size() > 3 || (s.size() > 1 && s[0] == '0')) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return parseInt(s, 0, ClassTable::kMaxNcclClass, n);
}

}  // namespace

const char* serviceName(Service s) { return kServiceNames[static_cast<int>(s)]; }
const char* orderName(Order o) { return kOrderNames[static_cast<int>(o)]; }
const char* fallbackName(Fallback f) { return kFallbackNames[static_cast<int>(f)]; }
const char* steerName(Steer s) { return kSteerNames[static_cast<int>(s)]; }
const char* faceName(Face f) { return f == Face::kNccl ? "NCCL comms" : "engine transfers"; }

const ProfileKeyInfo* profileKey(std::string_view key) {
  for (const auto& d : keyDefs())
    if (key == d.info.key) return &d.info;
  return nullptr;
}

std::string formatSize(uint64_t bytes) {
  if (bytes == 0) return "0";
  static constexpr struct { uint64_t unit; char suffix; } kUnits[] = {
      {1ull << 30, 'G'}, {1ull << 20, 'M'}, {1ull << 10, 'K'}};
  for (const auto& u : kUnits)
    if (bytes % u.unit == 0) return std::to_string(bytes / u.unit) + u.suffix;
  return std::to_string(bytes);
}

const std::vector<ProfileKeyInfo>& profileKeys() {
  static const std::vector<ProfileKeyInfo> keys = [] {
    std::vector<ProfileKeyInfo> out;
    for (const auto& d : keyDefs()) out.push_back(d.info);
    return out;
  }();
  return keys;
}

const char* profileGrammar() {
  return "A profile is a comma-separated list of tokens, each key=value or one of the shorthands "
         "rc, ud (service=) and ordered, unordered (order=), applied left to right: a later "
         "token overrides an earlier one. Sizes take K, M or G suffixes, durations us, ms or s. "
         "PACT_TC_DEFAULT is applied on top of the built-in defaults, every other class on top "
         "of PACT_TC_DEFAULT.";
}

Result<Profile> Profile::parse(std::string_view text, const Profile& base,
                               std::vector<std::pair<std::string, std::string>>* keys) {
  Profile p = base;
  auto note = [&](std::string_view key, std::string_view token) {
    if (keys == nullptr) return;
    for (auto& [k, t] : *keys)
      if (k == key) {
        t = token;
        return;
      }
    keys->emplace_back(key, token);
  };
  std::string_view lastSizeToken;  // the last chunk= or credits= token, for the cross-check
  bool lastWasCredits = false;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view token = trim(rest.substr(0, comma));
    if (token == "rc" || token == "ud") {
      p.service = token == "rc" ? Service::kRc : Service::kUd;
      note("service", token);
    } else if (token == "ordered" || token == "unordered") {
      p.order = token == "ordered" ? Order::kOrdered : Order::kUnordered;
      note("order", token);
    } else {
      const size_t eq = token.find('=');
      const std::string_view key = trim(token.substr(0, eq));
      const KeyDef* def = nullptr;
      for (const auto& d : keyDefs())
        if (eq != std::string_view::npos && key == d.info.key) def = &d;
      if (def == nullptr) return tokenError(token, tokenAllowed());
      if (!def->apply(trim(token.substr(eq + 1)), p)) return tokenError(token, def->info.allowed);
      note(key, token);
      if (key == "chunk" || key == "credits") {
        lastSizeToken = token;
        lastWasCredits = key == "credits";
      }
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (p.credits != 0 && p.credits < p.chunk) {
    if (lastWasCredits || lastSizeToken.empty())
      return tokenError(lastSizeToken.empty() ? trim(text) : lastSizeToken,
                        std::string("0 (unlimited) or a size of at least chunk (") +
                            formatSize(p.chunk) + ")");
    return tokenError(lastSizeToken, std::string(kChunkAllowed) + ", at most credits (" +
                                         formatSize(p.credits) + ")");
  }
  return p;
}

Result<Profile> Profile::parse(std::string_view text) { return parse(text, Profile{}); }

std::string Profile::describe() const {
  return std::string("service=") + serviceName(service) + ",order=" + orderName(order) +
         ",lanes=" + std::to_string(lanes) + ",chunk=" + formatSize(chunk) +
         ",credits=" + formatSize(credits) + ",timeout=" + formatDuration(timeout) +
         ",retries=" + std::to_string(retries) + ",verify=" + verifyName(verify) +
         ",tc=" + formatQos(tc) + ",sl=" + formatQos(sl) + ",fallback=" + fallbackName(fallback) +
         ",steer=" + steerName(steer) + ",eager=" + formatSize(eager) +
         ",priority=" + std::to_string(priority);
}

const std::vector<std::string>& ClassTable::engineClassNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (auto& s : registryClassSuffixes())
      if (s != "DEFAULT" && s != "<n>") out.push_back(s);
    return out;
  }();
  return names;
}

bool ClassTable::isEngineClass(std::string_view name) {
  const auto& names = engineClassNames();
  return std::find(names.begin(), names.end(), upper(name)) != names.end();
}

ClassTable::ClassTable() {
  for (const auto& n : engineClassNames()) engine_.emplace(n, default_);
}

namespace {
Error invalidVariable(const std::string& var, const std::string& value, const Error& e) {
  return Error{Status::kInvalidArgument, "invalid " + var + "='" + value + "': " + e.message};
}
// The first of keys that `face` refuses, as the token's error; ok when none.
Status refusedKey(const std::vector<std::pair<std::string, std::string>>& keys, Face face, Error* why) {
  for (const auto& [key, token] : keys) {
    const ProfileKeyInfo* k = profileKey(key);
    if (k == nullptr || !k->on(face).refused) continue;
    *why = Error{Status::kInvalidArgument, "'" + token + "': not on " + faceName(face) + ": " + k->on(face).what};
    return Status::kInvalidArgument;
  }
  return Status::kOk;
}
}  // namespace

Result<ClassTable> ClassTable::load(const std::map<std::string, std::string>& env) {
  ClassTable t;
  auto invalid = invalidVariable;
  const std::string defaultVar = std::string(kPrefix) + "DEFAULT";
  if (auto it = env.find(defaultVar); it != env.end()) {
    auto p = Profile::parse(it->second, Profile{}, &t.keys_[defaultVar]);
    if (!p.ok()) return invalid(it->first, it->second, p.error());
    t.default_ = *p;
    t.set_[defaultVar] = true;
    t.defaultText_ = it->second;
  }
  for (auto& [name, profile] : t.engine_) profile = t.default_;

  for (const auto& [var, value] : env) {
    if (var.compare(0, kPrefix.size(), kPrefix) != 0 || var == defaultVar) continue;
    const std::string_view suffix = std::string_view(var).substr(kPrefix.size());
    int n = 0;
    Profile* target = nullptr;
    const bool isNccl = parseNcclClass(suffix, &n);
    if (isNccl) {
      target = &t.nccl_[n];
    } else if (auto e = t.engine_.find(suffix); e != t.engine_.end()) {
      target = &e->second;
    } else {
      std::string names = "DEFAULT";
      for (const auto& e : engineClassNames()) names += ", " + e;
      return invalid(var, value,
                     tokenError(suffix, "a class " + names + " or a number from 0 to " +
                                            std::to_string(kMaxNcclClass)));
    }
    auto& keys = t.keys_[var];
    auto p = Profile::parse(value, t.default_, &keys);
    if (!p.ok()) return invalid(var, value, p.error());
    // A class serves one face: a key that face cannot honour is refused, never ignored.
    Error why;
    if (refusedKey(keys, isNccl ? Face::kNccl : Face::kEngine, &why) != Status::kOk)
      return invalid(var, value, why);
    *target = *p;
    t.set_[var] = true;
  }
  return t;
}

Status ClassTable::checkDefaultFor(Face face, Error* why) const {
  const std::string var = std::string(kPrefix) + "DEFAULT";
  auto it = keys_.find(var);
  if (it == keys_.end()) return Status::kOk;
  Error e;
  if (refusedKey(it->second, face, &e) == Status::kOk) return Status::kOk;
  *why = invalidVariable(var, defaultText_, e);
  return why->status;
}

bool ClassTable::mixedPriorities() const {
  auto differs = [&](const Profile& p) { return p.priority != default_.priority; };
  for (const auto& [n, p] : nccl_)
    if (differs(p)) return true;
  for (const auto& [n, p] : engine_)
    if (differs(p)) return true;
  return false;
}

bool ClassTable::yields(const Profile& profile) const {
  auto above = [&](const Profile& p) { return p.priority > profile.priority; };
  return above(default_) || std::any_of(nccl_.begin(), nccl_.end(), [&](const auto& e) { return above(e.second); }) ||
         std::any_of(engine_.begin(), engine_.end(), [&](const auto& e) { return above(e.second); });
}

const Profile& ClassTable::forNccl(int trafficClass) const {
  auto it = nccl_.find(trafficClass);
  return it == nccl_.end() ? default_ : it->second;
}

std::string ClassTable::canonicalName(std::string_view name) {
  return isEngineClass(name) ? upper(name) : std::string("DEFAULT");
}

const Profile& ClassTable::forName(std::string_view name) const {
  auto it = engine_.find(upper(name));
  return it == engine_.end() ? default_ : it->second;
}

std::vector<ClassTable::Entry> ClassTable::entries() const {
  std::vector<Entry> out;
  auto add = [&](const std::string& name, const Profile& p) {
    std::string var = std::string(kPrefix) + name;
    bool set = set_.count(var) != 0;
    auto k = keys_.find(var);
    out.push_back(Entry{name, var, p, set, k == keys_.end() ? decltype(Entry::keys){} : k->second});
  };
  add("DEFAULT", default_);
  for (const auto& [n, p] : nccl_) add(std::to_string(n), p);
  for (const auto& name : engineClassNames()) add(name, engine_.find(name)->second);
  return out;
}

std::vector<std::pair<std::string, std::string>> ClassTable::effective() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& suffix : registryClassSuffixes()) {
    if (suffix == "<n>") {
      if (nccl_.empty())
        out.emplace_back(std::string(kPrefix) + suffix,
                         "none set (every NCCL traffic class uses PACT_TC_DEFAULT)");
      for (const auto& [n, p] : nccl_)
        out.emplace_back(std::string(kPrefix) + std::to_string(n), p.describe());
    } else {
      out.emplace_back(std::string(kPrefix) + suffix, forName(suffix).describe());
    }
  }
  return out;
}

}  // namespace pact
