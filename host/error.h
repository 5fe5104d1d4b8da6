// The host's error type. Inside the host, failures are exceptions carrying one user-facing line; they are
// caught at the command line (printed, non-zero exit) and never cross into a plugin.
#pragma once

#include <stdexcept>
#include <string>

namespace cellm {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace cellm
