// The transfer engines the engine scenarios (soak, mix, pact-engine-rails) create: one with its own
// progress thread, listening where asked.
#pragma once

#include <cstdint>

#include "pact/pact.h"

namespace pact::perf {

// listen_ip: nullptr for none; port 0: the kernel's choice. pact_engine_create's status (on
// failure, pact_last_error() says why).
inline pact_status_t progressEngine(const char* name, const char* listen_ip, uint16_t port,
                                    pact_engine_t* engine) {
  pact_engine_config_t c;
  pact_engine_config_init(&c);
  c.name = name;
  c.listen_ip = listen_ip;
  c.listen_port = port;
  c.progress_thread = 1;
  *engine = nullptr;
  return pact_engine_create(&c, engine);
}

}  // namespace pact::perf
