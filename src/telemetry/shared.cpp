#include "telemetry/shared.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <string>
#include <vector>

#include "common/log.h"
#include "pact_config.h"

namespace pact::telemetry {
namespace {

// What must be equal for two copies to share state: the build's version and compiler, the sizes
// of what they share, and every catalog's counters in order.
const std::string& fingerprint() {
  static const std::string f = [] {
    std::string s = "pact " PACT_VERSION "; " __VERSION__ "; ";
    for (size_t n : {sizeof(Shared), sizeof(Registry), sizeof(CounterSet), sizeof(std::string), sizeof(std::mutex)})
      s += std::to_string(n) + " ";
    for (const Catalog* c : Registry::catalogs()) {
      s += std::string("; ") + scopeName(c->scope);
      for (const CounterInfo& i : c->counters)
        s += std::string(",") + i.name + (i.gauge ? "~" : "") + (i.kind != nullptr ? std::string("/") + i.kind : "");
    }
    return s;
  }();
  return f;
}

std::atomic<Shared*> gPublished{nullptr};  // what this copy uses, for later copies to adopt
std::string gAdoptedFrom;                  // set once, before gPublished

using JoinFn = void* (*)(const char* fingerprint, int* mismatch);

// The base address of the object that holds this copy: its own exported symbol cannot tell, as
// another object's definition of it interposes on this copy's references to it.
const void* objectOf(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) != 0 ? info.dli_fbase : nullptr;
}

// Every pact_telemetry_join_v1 in the process but this copy's, with the object that holds it: the
// global scope (an executable that exports it), then each loaded object by name (the plugin and
// the Python extension are loaded RTLD_LOCAL, out of the global scope's reach).
std::vector<std::pair<JoinFn, std::string>> otherCopies() {
  const void* self = objectOf(reinterpret_cast<const void*>(&fingerprint));
  std::vector<std::pair<JoinFn, std::string>> out;
  auto add = [&](void* sym, const std::string& where) {
    auto fn = reinterpret_cast<JoinFn>(sym);
    if (fn == nullptr || objectOf(sym) == self) return;
    for (const auto& o : out)
      if (o.first == fn) return;
    out.emplace_back(fn, where);
  };
  add(dlsym(RTLD_DEFAULT, "pact_telemetry_join_v1"), "the executable");
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* v) {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0')
          static_cast<std::vector<std::string>*>(v)->emplace_back(info->dlpi_name);
        return 0;
      },
      &names);
  for (const std::string& name : names) {  // dlopen outside dl_iterate_phdr's lock
    void* h = dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) continue;
    add(dlsym(h, "pact_telemetry_join_v1"), name);
    dlclose(h);  // NOLOAD took a reference
  }
  return out;
}

Shared* create() {
  auto* s = new Shared;
  s->catalogs.resize(static_cast<size_t>(Scope::kLane) + 1);
  for (const Catalog* c : Registry::catalogs()) {
    auto& infos = s->infos.emplace_back();
    for (const CounterInfo& i : c->counters) {
      const char* name = s->texts.emplace_back(i.name).c_str();
      const char* doc = s->texts.emplace_back(i.doc).c_str();
      const char* kind = i.kind != nullptr ? s->texts.emplace_back(i.kind).c_str() : nullptr;
      infos.push_back(CounterInfo{name, doc, i.gauge, kind});
    }
    s->catalogs[static_cast<size_t>(c->scope)] = Catalog{c->scope, infos};
  }
  return s;
}

Shared* adoptOrCreate() {
  for (const auto& [join, where] : otherCopies()) {
    int mismatch = 0;
    if (void* p = join(fingerprint().c_str(), &mismatch)) {
      gAdoptedFrom = where;
      return static_cast<Shared*>(p);
    }
    if (mismatch)
      PACT_INFO("telemetry: %s holds pact of another build; its counters and timeline stay apart from this copy's",
                where.c_str());
  }
  return create();
}

}  // namespace
}  // namespace pact::telemetry

// Another copy asks for this copy's state: given when this copy has it and the builds match.
extern "C" __attribute__((visibility("default"))) void* pact_telemetry_join_v1(const char* fingerprint, int* mismatch) {
  using namespace pact::telemetry;
  Shared* s = gPublished.load(std::memory_order_acquire);
  if (s == nullptr) return nullptr;
  if (pact::telemetry::fingerprint() != fingerprint) {
    *mismatch = 1;
    return nullptr;
  }
  return s;
}

namespace pact::telemetry {

Shared& shared() {
  static Shared* const s = [] {
    Shared* p = adoptOrCreate();
    gPublished.store(p, std::memory_order_release);
    return p;
  }();
  return *s;
}

const Catalog& sharedCatalog(const Catalog& catalog) {
  const auto& all = shared().catalogs;
  const auto i = static_cast<size_t>(catalog.scope);
  return i < all.size() && !all[i].counters.empty() ? all[i] : catalog;
}

std::string copyName() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&fingerprint), &info) == 0 || info.dli_fname == nullptr) return "?";
  const std::string path = info.dli_fname;
  return path.substr(path.rfind('/') + 1);
}

bool sharedIsAdopted(std::string* from) {
  shared();
  if (from != nullptr) *from = gAdoptedFrom;
  return !gAdoptedFrom.empty();
}

}  // namespace pact::telemetry
