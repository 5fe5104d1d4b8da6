// An error the server answers with, in OpenAI's shape: {"error": {"message", "type", "param", "code"}}. Request
// handling throws it from wherever the problem is found; the route wrapper turns it into the response.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace cellm::server {

class ApiError : public std::runtime_error {
public:
    // An empty code or param is sent as null, as OpenAI does when there is nothing to name.
    ApiError(int http_status, const std::string& message, std::string error_code, std::string error_param = {},
             std::string error_type = "invalid_request_error")
        : std::runtime_error(message), status(http_status), code(std::move(error_code)),
          param(std::move(error_param)), type(std::move(error_type)) {}

    int status;
    std::string code;
    std::string param;
    std::string type;
};

}  // namespace cellm::server
