// A Jinja2 interpreter for the chat templates models carry (GGUF tokenizer.chat_template, tokenizer_config.json's
// chat_template), rendering them as transformers' apply_chat_template does: trim_blocks and lstrip_blocks on,
// `tojson` as json.dumps(ensure_ascii=False), raise_exception() and strftime_now() as globals.
//
// Three stages, three files: lexer.cpp (source -> tokens), parser.cpp (tokens -> tree), interpreter.cpp (tree
// + context -> text) over the value type of value.h.
#pragma once

#include "error.h"

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cellm::jinja {

// A template that does not parse or fails to render (raise_exception included). One line that names the
// template's line: "chat template line 12: unknown filter 'frobnicate'".
class TemplateError : public Error {
public:
    using Error::Error;
};

struct RenderOptions {
    // strftime_now()'s clock; unset: the current local time.
    std::optional<std::time_t> now;
};

struct Program;  // the parsed tree (parser.h)

class Template {
public:
    // Parses `source`. Throws TemplateError naming the line. Limits on nesting keep hostile sources bounded.
    static Template parse(std::string_view source);

    // Renders with `context`'s keys as variables (messages, tools, add_generation_prompt, bos_token, ...).
    // Throws TemplateError naming the line. Output and loop work are bounded, so a hostile template ends in an
    // error, never a hang. Any thread; a Template is immutable once parsed.
    std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

private:
    explicit Template(std::shared_ptr<const Program> program);
    std::shared_ptr<const Program> program_;
};

}  // namespace cellm::jinja
