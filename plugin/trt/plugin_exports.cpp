// What TensorRT looks up in a plugin library (IPluginRegistry::loadLibrary, trtexec
// --dynamicPlugins): getCreators for IPluginV3 creators, setLoggerFinder for its logger. The
// library links no TensorRT library: these are the only symbols it exports.
#include <NvInferRuntime.h>

#include "bevpool_plugin.h"
#include "plugin_log.h"

#define BEVPOOL_EXPORT extern "C" __attribute__((visibility("default")))

BEVPOOL_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder) {
  bevpool::set_logger_finder(finder);
}

BEVPOOL_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) {
  static bevpool::BevPoolCreator creator;
  static nvinfer1::IPluginCreatorInterface* const creators[] = {&creator};
  nbCreators = 1;
  return creators;
}
