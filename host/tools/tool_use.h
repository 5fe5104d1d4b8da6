// A session's tools, as the SDK takes them (cellm_session_options.tools, tool_choice, parallel_tool_calls): the
// functions, the choice, and the call format of the model they are used with.
#pragma once

#include "tools/tool.h"
#include "tools/tool_format.h"

#include <vector>

namespace cellm::tools {

struct ToolUse {
    std::vector<Tool> tools;
    ToolChoice choice;
    bool parallel = true;
    ToolFormat format = ToolFormat::Hermes;
};

}  // namespace cellm::tools
