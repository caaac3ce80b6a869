// ncclNetPlugin_v10 (NCCL 2.26+): profiler callback in init, traffic class in connect, profiler
// handles on isend/irecv (profiler.h).
#include "abi/net_v10.h"
#include "plugin/nccl/adapters.h"

namespace pact::plugin {
namespace {

ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t prof) {
  profiler::set(prof);
  return plugin::init(nullptr, -1, logger);
}

ncclResult_t getProperties(int dev, ncclNetProperties_v10_t* props) {
  return guard("getProperties", [&] {
    net::Properties core;
    ncclResult_t r = fillCommon(dev, props, &core);
    if (r != ncclSuccess) return r;
    props->regIsGlobal = core.regIsGlobal;
    props->forceFlush = core.forceFlush;
    fillVProps(&props->vProps, core);
    props->maxP2pBytes = core.maxP2pBytes;
    props->maxCollBytes = core.maxCollBytes;
    return r;
  });
}

ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v10_t** devComm) {
  return connect(config ? config->trafficClass : -1, dev, handle, sendComm, devComm);
}

}  // namespace
}  // namespace pact::plugin

using namespace pact::plugin;

extern "C" __attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "PACT",
    .init = initV10,
    .devices = devices,
    .getProperties = pact::plugin::getProperties,
    .listen = listenNoClass,
    .connect = connectV10,
    .accept = accept,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isendP,
    .irecv = irecvP,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = makeVDeviceV<ncclNetVDeviceProps_v10_t>,
};
