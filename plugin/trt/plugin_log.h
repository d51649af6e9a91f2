// Messages to TensorRT's logger (found through the ILoggerFinder TensorRT hands the library),
// or to stderr when the library is driven without TensorRT.
#pragma once
#include <NvInferRuntime.h>

#include <string>

namespace bevpool {

void set_logger_finder(nvinfer1::ILoggerFinder* finder);
void log_error(const std::string& message);

}  // namespace bevpool
