#include "plugin_log.h"

#include <atomic>
#include <cstdio>

namespace bevpool {
namespace {
std::atomic<nvinfer1::ILoggerFinder*> g_finder{nullptr};
}  // namespace

void set_logger_finder(nvinfer1::ILoggerFinder* finder) { g_finder.store(finder); }

void log_error(const std::string& message) {
  nvinfer1::ILoggerFinder* finder = g_finder.load();
  nvinfer1::ILogger* logger = finder != nullptr ? finder->findLogger() : nullptr;
  if (logger != nullptr)
    logger->log(nvinfer1::ILogger::Severity::kERROR, message.c_str());
  else
    std::fprintf(stderr, "[bevpool_trt_plugin] ERROR: %s\n", message.c_str());
}

}  // namespace bevpool
