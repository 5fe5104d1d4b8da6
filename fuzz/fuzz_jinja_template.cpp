// libFuzzer target: the Jinja interpreter (host/jinja). The input is a chat template; it is parsed and rendered
// with a small conversation (system, user, an assistant tool call, its result), tools and add_generation_prompt.
// Any failure must be a cellm::Error (TemplateError); crashes, leaks, hangs and sanitizer reports are findings.
#include "error.h"
#include "jinja/template.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string_view>

namespace {

const nlohmann::ordered_json& context() {
    static const nlohmann::ordered_json c = nlohmann::ordered_json::parse(R"({
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris? caf\u00e9"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a1b2c3d4e", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2.5, null, true]}}}]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "{\"t\": 18}"}
      ],
      "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
      "documents": null,
      "add_generation_prompt": true,
      "bos_token": "<s>",
      "eos_token": "</s>"
    })");
    return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view source(reinterpret_cast<const char*>(data), size);
    cellm::jinja::RenderOptions options;
    options.now = 1752537600;
    try {
        cellm::jinja::Template::parse(source).render(context(), options);
    } catch (const cellm::Error&) {
    }
    return 0;
}
