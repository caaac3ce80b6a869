// pact._pact: the extension module behind the pact package (python/pact/__init__.py).
#include <nanobind/stl/string.h>

#include "binding.h"
#include "pact_config.h"

#define PACT_STR2(x) #x
#define PACT_STR(x) PACT_STR2(x)

NB_MODULE(_pact, m) {
  m.doc() = "pact transfer engine for Python (C API v" PACT_STR(PACT_API_VERSION) ")";
  m.attr("API_VERSION") = PACT_API_VERSION;
  m.attr("__version__") = PACT_VERSION;  // pact's release (meson.build's project version)
  m.def("status_string", [](int s) { return std::string(pact_status_string(static_cast<pact_status_t>(s))); },
        nanobind::arg("status"), "Constant name of a status code ('PACT_ERR_DEADLINE').");
  pact::py::bindMemory(m);
  pact::py::bindEngine(m);
}
