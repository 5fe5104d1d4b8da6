#include "openai_request.h"

#include "api_error.h"
#include "base64.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <limits>

namespace cellm::server {

namespace {

using json = nlohmann::ordered_json;  // in the order given: a schema's properties are generated in that order

// More than OpenAI's 4, few enough that checking them after every token stays cheap.
constexpr size_t kMaxStopStrings = 16;

[[noreturn]] void invalid(const std::string& param, const std::string& message, const char* code = "invalid_value") {
    throw ApiError(400, message, code, param);
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected) {
    invalid(param, param + " must be " + expected, "invalid_type");
}

[[noreturn]] void unsupported(const char* param, const std::string& message) {
    throw ApiError(400, message, "unsupported_parameter", param);
}

// The value of `key`, or nullptr when it is absent or null: clients send null to mean "not given".
const json* field(const json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::string format_number(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", x);
    return text;
}

std::optional<float> number(const json& body, const char* key, double lo, double hi) {
    const json* value = field(body, key);
    if (!value) return std::nullopt;
    if (!value->is_number()) wrong_type(key, "a number");
    const auto x = value->get<double>();
    if (!(x >= lo && x <= hi)) {
        invalid(key, std::string(key) + " must be between " + format_number(lo) + " and " + format_number(hi));
    }
    return static_cast<float>(x);
}

// An integer field, saturated to int64 (a seed may be any unsigned 64-bit value; see seed below).
std::optional<int64_t> integer(const json& body, const char* key) {
    const json* value = field(body, key);
    if (!value) return std::nullopt;
    if (!value->is_number_integer()) wrong_type(key, "an integer");
    if (value->is_number_unsigned()) {
        return static_cast<int64_t>(std::min<uint64_t>(value->get<uint64_t>(), std::numeric_limits<int64_t>::max()));
    }
    return value->get<int64_t>();
}

// A count that cellm takes as int32: huge values mean "no limit" to clients, so they saturate.
std::optional<int32_t> count(const json& body, const char* key, int64_t min) {
    const std::optional<int64_t> value = integer(body, key);
    if (!value) return std::nullopt;
    if (*value < min) invalid(key, std::string(key) + " must be at least " + std::to_string(min));
    return static_cast<int32_t>(std::min<int64_t>(*value, std::numeric_limits<int32_t>::max()));
}

std::optional<bool> boolean(const json& object, const char* key, const std::string& param) {
    const json* value = field(object, key);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) wrong_type(param, "a boolean");
    return value->get<bool>();
}

// Fields asking for something this server cannot do. Each is refused unless it holds the value that asks
// for nothing, so clients that always send the defaults keep working.
void refuse_unsupported(const json& body, Endpoint endpoint) {
    const auto given = [&](const char* key, const auto& harmless) {
        const json* value = field(body, key);
        return value != nullptr && !harmless(*value);
    };
    const auto is_one = [](const json& v) { return v.is_number_integer() && v == 1; };
    const auto is_false = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
    const auto is_zero = [](const json& v) { return v.is_number_integer() && v == 0; };
    const auto is_empty = [](const json& v) { return (v.is_string() || v.is_array() || v.is_object()) && v.empty(); };

    if (given("best_of", is_one)) unsupported("best_of", "best_of must be 1: this server samples one answer per choice");
    if (given("echo", is_false)) unsupported("echo", "echo is not supported");
    if (endpoint == Endpoint::completion && given("top_logprobs", is_zero)) {
        unsupported("top_logprobs", "top_logprobs is a chat field: the completions API takes logprobs: N (0..5)");
    }
    if (given("suffix", is_empty)) unsupported("suffix", "suffix (insertion) is not supported");
    if (given("functions", is_empty)) unsupported("functions", "functions (OpenAI's deprecated form) are not supported: use tools");
    if (given("function_call", [](const json& v) { return v == "none"; })) {
        unsupported("function_call", "function_call (OpenAI's deprecated form) is not supported: use tool_choice");
    }
    if (endpoint == Endpoint::completion) {
        for (const char* key : {"tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs"}) {
            if (field(body, key)) unsupported(key, std::string(key) + " is a chat field: /v1/completions has no tools");
        }
    }
}

// tools, tool_choice and parallel_tool_calls, passed on as JSON text: the engine checks them against the model
// and names the field of what it refuses.
void parse_tools(const json& body, CompletionRequest& r) {
    if (const json* tools = field(body, "tools")) {
        if (!tools->is_array()) wrong_type("tools", "an array");
        if (!tools->empty()) r.tools = tools->dump();
    }
    if (const json* choice = field(body, "tool_choice")) {
        if (!choice->is_string() && !choice->is_object()) wrong_type("tool_choice", "a string or an object");
        r.tool_choice = choice->is_string() ? choice->get<std::string>() : choice->dump();
        if (!r.tools && *choice != "none") invalid("tool_choice", "tool_choice needs tools");
    }
    r.parallel_tool_calls = boolean(body, "parallel_tool_calls", "parallel_tool_calls").value_or(true);
    if (const json* kwargs = field(body, "chat_template_kwargs")) {
        if (!kwargs->is_object()) wrong_type("chat_template_kwargs", "an object");
        r.chat_template_kwargs = kwargs->dump();
    }
}

int32_t parse_n(const json& body) {
    const std::optional<int64_t> n = integer(body, "n");
    if (!n) return 1;
    if (*n < 1 || *n > kMaxChoices) invalid("n", "n must be between 1 and " + std::to_string(kMaxChoices));
    return static_cast<int32_t>(*n);
}

// Chat: logprobs (a boolean) and top_logprobs (0..20, OpenAI's range). Completions: logprobs is the number of
// alternatives (0..5, OpenAI's range); the chosen token's log-probability always comes with it.
void parse_logprobs(const json& body, Endpoint endpoint, CompletionRequest& r) {
    if (endpoint == Endpoint::chat) {
        r.logprobs = boolean(body, "logprobs", "logprobs").value_or(false);
        const std::optional<int64_t> top = integer(body, "top_logprobs");
        if (!top) return;
        if (*top < 0 || *top > 20) invalid("top_logprobs", "top_logprobs must be between 0 and 20");
        if (*top > 0 && !r.logprobs) invalid("top_logprobs", "top_logprobs needs logprobs: true");
        r.top_logprobs = static_cast<int32_t>(*top);
        return;
    }
    const json* value = field(body, "logprobs");
    if (!value) return;
    if (!value->is_number_integer()) wrong_type("logprobs", "an integer between 0 and 5");
    const std::optional<int64_t> top = integer(body, "logprobs");
    if (*top < 0 || *top > 5) invalid("logprobs", "logprobs must be between 0 and 5");
    r.logprobs = true;
    r.top_logprobs = static_cast<int32_t>(*top);
}

// {"TOKEN_ID": bias, ...}, OpenAI's shape: ids as decimal strings, biases in [-100, 100].
std::vector<cellm_logit_bias> parse_logit_bias(const json& body, int32_t n_vocab) {
    const json* bias = field(body, "logit_bias");
    if (!bias) return {};
    if (!bias->is_object()) wrong_type("logit_bias", "an object mapping token ids to biases");
    std::vector<cellm_logit_bias> out;
    for (const auto& [key, value] : bias->items()) {
        const std::string shown = key.size() > 24 ? key.substr(0, 24) + "..." : key;
        int64_t id = -1;
        const char* end = key.data() + key.size();
        const auto parsed = std::from_chars(key.data(), end, id);
        if (parsed.ec != std::errc() || parsed.ptr != end || id < 0 || id >= n_vocab) {
            invalid("logit_bias", "logit_bias key '" + shown + "' is not a token id of this model (0 to " +
                                      std::to_string(n_vocab - 1) + ")");
        }
        if (!value.is_number()) wrong_type("logit_bias", "an object whose values are numbers");
        const auto b = value.get<double>();
        if (!(b >= -100 && b <= 100)) invalid("logit_bias", "logit_bias[\"" + shown + "\"] must be between -100 and 100");
        out.push_back({static_cast<int32_t>(id), static_cast<float>(b)});
    }
    return out;
}

// A JSON Schema as the engine takes it: compact text. A schema is an object, or true / false.
std::string schema_text(const json& schema, const std::string& param) {
    if (!schema.is_object() && !schema.is_boolean()) wrong_type(param, "a JSON Schema (an object)");
    return schema.dump();
}

// response_format (OpenAI's), grammar and json_schema (llama-server's): at most one may constrain the answer.
void parse_constraint(const json& body, CompletionRequest& r) {
    const auto take = [&](const char* param, std::optional<std::string>& slot, std::string text) {
        if (r.grammar || r.json_schema) {
            invalid(param, std::string("at most one of response_format, grammar and json_schema may be given; ") +
                               r.constraint_param + " already is");
        }
        if (text.size() > kMaxGrammarBytes) {
            invalid(param, std::string(param) + " is " + std::to_string(text.size()) + " bytes long; at most " +
                               std::to_string(kMaxGrammarBytes) + " are accepted");
        }
        slot = std::move(text);
        r.constraint_param = param;
    };
    if (const json* format = field(body, "response_format")) {
        if (!format->is_object()) wrong_type("response_format", "an object");
        const json* type = field(*format, "type");
        if (!type || !type->is_string()) {
            wrong_type("response_format.type", "\"text\", \"json_object\" or \"json_schema\"");
        }
        const std::string& kind = type->get_ref<const std::string&>();
        if (kind == "json_object") {
            // llama-server's extension: a schema may come with it.
            const json* schema = field(*format, "schema");
            take("response_format", r.json_schema,
                 schema ? schema_text(*schema, "response_format.schema") : R"({"type":"object"})");
        } else if (kind == "json_schema") {
            const std::string param = "response_format.json_schema";
            const json* spec = field(*format, "json_schema");
            if (!spec) invalid(param, param + " is required", "missing_required_parameter");
            if (!spec->is_object()) wrong_type(param, "an object {\"name\", \"schema\", \"strict\"}");
            if (const json* name = field(*spec, "name"); name && !name->is_string()) wrong_type(param + ".name", "a string");
            if (const json* strict = field(*spec, "strict"); strict && !strict->is_boolean()) {
                wrong_type(param + ".strict", "a boolean");
            }
            // Without a schema any JSON value will do, as llama-server takes it. Strict or not, the schema is
            // always enforced.
            const json* schema = field(*spec, "schema");
            take("response_format", r.json_schema, schema ? schema_text(*schema, param + ".schema") : "{}");
        } else if (kind != "text") {
            invalid("response_format.type", "response_format.type must be \"text\", \"json_object\" or "
                    "\"json_schema\", not '" + kind + "'", "unsupported_value");
        }
    }
    if (const json* grammar = field(body, "grammar")) {
        if (!grammar->is_string()) wrong_type("grammar", "a string (a GBNF grammar)");
        // llama-server reads an empty grammar as none.
        if (!grammar->get_ref<const std::string&>().empty()) take("grammar", r.grammar, grammar->get<std::string>());
    }
    if (const json* schema = field(body, "json_schema")) take("json_schema", r.json_schema, schema_text(*schema, "json_schema"));
}

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
    return text.size() >= prefix.size() &&
           std::equal(prefix.begin(), prefix.end(), text.begin(),
                      [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
}

std::string lowercase(std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// The file an image part carries: {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}, or
// "image_url" as the URL string itself, as some clients send it; "detail" changes nothing here. Only data: URLs of
// PNG or JPEG files in base64 (RFC 2397) are taken: cellm never fetches anything over the network.
std::vector<uint8_t> image_part_bytes(const json& part, const std::string& part_param) {
    std::string param = part_param + ".image_url";
    const json* image_url = field(part, "image_url");
    if (!image_url) invalid(param, param + " is required", "missing_required_parameter");
    const json* url = image_url;
    if (image_url->is_object()) {
        param += ".url";
        url = field(*image_url, "url");
        if (!url) invalid(param, param + " is required", "missing_required_parameter");
    }
    if (!url->is_string()) wrong_type(param, "a string (a data:image/png;base64 or data:image/jpeg;base64 URL)");
    const std::string_view text = url->get_ref<const std::string&>();

    if (starts_with_nocase(text, "http://") || starts_with_nocase(text, "https://")) {
        invalid(param, param + ": remote image URLs are not supported (cellm never fetches over the network); send the "
                "image inline as data:image/png;base64,... or data:image/jpeg;base64,...", "unsupported_value");
    }
    const size_t comma = text.find(',');
    if (!starts_with_nocase(text, "data:") || comma == std::string_view::npos) {
        invalid(param, param + " must be a data URL: data:image/png;base64,... or data:image/jpeg;base64,...");
    }
    // data:MEDIATYPE[;PARAMETER...];base64,DATA
    const std::string header = lowercase(text.substr(5, comma - 5));
    const std::string media_type = header.substr(0, header.find(';'));
    if (media_type != "image/png" && media_type != "image/jpeg" && media_type != "image/jpg") {
        invalid(param, param + ": only PNG and JPEG images are supported (image/png, image/jpeg), not '" +
                media_type + "'", "unsupported_value");
    }
    if (header.size() < 7 || header.compare(header.size() - 7, 7, ";base64") != 0) {
        invalid(param, param + " must be base64-encoded: data:" + media_type + ";base64,...");
    }

    const std::string_view data = text.substr(comma + 1);
    if (data.empty()) invalid(param, param + " holds no image data");
    if (base64_decoded_size(data) > kMaxImageBytes) {
        invalid(param, param + ": the image is larger than " + std::to_string(kMaxImageBytes >> 20) + " MiB");
    }
    try {
        return decode_base64(data);
    } catch (const Base64Error& e) {
        invalid(param, param + " is not valid base64: " + e.what());
    }
}

// A message's content: a string, or an array of parts. Text parts ({"type": "text", "text"}) that follow each
// other are joined by a newline. An image part (image_url) becomes kImageMarker in its place, with nothing added
// around it, as Hugging Face's chat templates for SmolVLM and Idefics3 write an image part; its file goes to
// `images`. llama-server differs: its marker becomes a text part, joined like the others.
std::string message_content(const json& message, const std::string& path, CompletionRequest& request) {
    const std::string param = path + ".content";
    const json* content = field(message, "content");
    if (content && content->is_string()) return content->get<std::string>();
    if (!content || !content->is_array()) wrong_type(param, "a string or an array of content parts");
    std::string text;
    bool after_text = false;
    for (size_t i = 0; i < content->size(); ++i) {
        const json& part = (*content)[i];
        const std::string part_param = param + "[" + std::to_string(i) + "]";
        if (!part.is_object()) wrong_type(part_param, "an object");
        const json* type = field(part, "type");
        if (type && *type == "image_url") {
            if (request.images.empty()) request.images_param = part_param;
            request.images.push_back(image_part_bytes(part, part_param));
            text += kImageMarker;
            after_text = false;
            continue;
        }
        if (!type || *type != "text") {
            invalid(part_param + ".type",
                    part_param + ".type must be \"text\" or \"image_url\": no other content is supported",
                    "unsupported_value");
        }
        const json* part_text = field(part, "text");
        if (!part_text || !part_text->is_string()) wrong_type(part_param + ".text", "a string");
        if (after_text) text += '\n';
        text += part_text->get<std::string>();
        after_text = true;
    }
    return text;
}

std::vector<ChatMessage> parse_messages(const json& body, CompletionRequest& request) {
    const json* messages = field(body, "messages");
    if (!messages) invalid("messages", "messages is required", "missing_required_parameter");
    if (!messages->is_array()) wrong_type("messages", "an array");
    if (messages->empty()) invalid("messages", "messages must not be empty");
    std::vector<ChatMessage> out;
    json request_messages = json::array();
    for (size_t i = 0; i < messages->size(); ++i) {
        const json& message = (*messages)[i];
        const std::string path = "messages[" + std::to_string(i) + "]";
        if (!message.is_object()) wrong_type(path, "an object");
        const json* role = field(message, "role");
        if (!role || !role->is_string()) wrong_type(path + ".role", "a string");
        std::string name = role->get<std::string>();
        // OpenAI's newer name for the system role; the chat templates know only "system".
        if (name == "developer") name = "system";
        if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
            invalid(path + ".role", path + ".role must be system, user, assistant or tool, not '" + name + "'",
                    "unsupported_value");
        }
        // An assistant message that only makes calls may have no content.
        const json* calls = field(message, "tool_calls");
        const json* content = field(message, "content");
        const bool calls_only = name == "assistant" && calls != nullptr && content == nullptr;
        std::string text = calls_only ? std::string() : message_content(message, path, request);
        json entry = {{"role", name}, {"content", text}};
        if (calls != nullptr) {
            entry["tool_calls"] = *calls;
            request.messages_have_tools = true;
        }
        for (const char* key : {"tool_call_id", "name"}) {
            if (const json* value = field(message, key); value != nullptr && name == "tool") entry[key] = *value;
        }
        if (name == "tool") request.messages_have_tools = true;
        request_messages.push_back(std::move(entry));
        out.push_back({std::move(name), std::move(text)});
    }
    request.messages_json = request_messages.dump();
    return out;
}

// A string, or (as OpenAI's clients may send) a list holding exactly one string.
std::string parse_prompt(const json& body) {
    const json* prompt = field(body, "prompt");
    if (!prompt) invalid("prompt", "prompt is required", "missing_required_parameter");
    const json* text = prompt;
    if (prompt->is_array()) {
        if (prompt->size() != 1) invalid("prompt", "prompt must be a string or a list of exactly one string");
        text = &prompt->front();
    }
    if (!text->is_string()) wrong_type("prompt", "a string or a list of exactly one string");
    if (text->get_ref<const std::string&>().empty()) invalid("prompt", "prompt must not be empty");
    return text->get<std::string>();
}

std::optional<std::vector<std::string>> parse_stop(const json& body) {
    const json* stop = field(body, "stop");
    if (!stop) return std::nullopt;
    std::vector<std::string> out;
    if (stop->is_string()) {
        out.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
        if (stop->size() > kMaxStopStrings) {
            invalid("stop", "stop holds at most " + std::to_string(kMaxStopStrings) + " strings");
        }
        for (const json& s : *stop) {
            if (!s.is_string()) wrong_type("stop", "a string or an array of strings");
            out.push_back(s.get<std::string>());
        }
    } else {
        wrong_type("stop", "a string or an array of strings");
    }
    // An empty stop string would match before the first token: certainly not what the client meant.
    if (std::any_of(out.begin(), out.end(), [](const std::string& s) { return s.empty(); })) {
        invalid("stop", "stop strings must not be empty");
    }
    return out;
}

json parse_body(std::string_view body) {
    json root = json::parse(body, nullptr, false);
    if (root.is_discarded()) throw ApiError(400, "the request body is not valid JSON", "invalid_json");
    if (!root.is_object()) throw ApiError(400, "the request body must be a JSON object", "invalid_json");
    return root;
}

}  // namespace

TokenizeRequest parse_tokenize_request(std::string_view body) {
    const json root = parse_body(body);
    TokenizeRequest r;
    const json* content = field(root, "content");
    if (!content) invalid("content", "content is required", "missing_required_parameter");
    if (!content->is_string()) wrong_type("content", "a string");
    r.content = content->get<std::string>();
    r.add_special = boolean(root, "add_special", "add_special").value_or(false);
    r.with_pieces = boolean(root, "with_pieces", "with_pieces").value_or(false);
    if (!boolean(root, "parse_special", "parse_special").value_or(true)) {
        invalid("parse_special", "parse_special false is not supported: special-token text is always parsed",
                "unsupported_value");
    }
    return r;
}

std::vector<int32_t> parse_detokenize_request(std::string_view body, int32_t n_vocab) {
    const json root = parse_body(body);
    const json* tokens = field(root, "tokens");
    if (!tokens) return {};
    if (!tokens->is_array()) wrong_type("tokens", "an array of token ids");
    std::vector<int32_t> ids;
    for (const json& token : *tokens) {
        if (!token.is_number_integer()) wrong_type("tokens", "an array of token ids");
        const bool in_range = token.is_number_unsigned() ? token.get<uint64_t>() < static_cast<uint64_t>(n_vocab)
                                                         : token.get<int64_t>() >= 0 && token.get<int64_t>() < n_vocab;
        if (!in_range) {
            invalid("tokens", "tokens[" + std::to_string(ids.size()) + "] = " + token.dump() +
                                  " is not a token id of this model (0 to " + std::to_string(n_vocab - 1) + ")");
        }
        ids.push_back(token.get<int32_t>());
    }
    return ids;
}

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body, int32_t n_vocab) {
    const json root = parse_body(body);
    refuse_unsupported(root, endpoint);

    CompletionRequest r;
    r.endpoint = endpoint;
    if (endpoint == Endpoint::chat) {
        r.messages = parse_messages(root, r);
    } else {
        r.prompt = parse_prompt(root);
    }
    if (const json* model = field(root, "model")) {
        if (!model->is_string()) wrong_type("model", "a string");
        r.model = model->get<std::string>();
    }
    r.stream = boolean(root, "stream", "stream").value_or(false);
    if (const json* options = field(root, "stream_options")) {
        if (!options->is_object()) wrong_type("stream_options", "an object");
        r.include_usage = boolean(*options, "include_usage", "stream_options.include_usage").value_or(false);
    }

    // max_completion_tokens is OpenAI's newer name; it wins when a client sends both.
    r.max_tokens = count(root, "max_completion_tokens", 1);
    if (!r.max_tokens) r.max_tokens = count(root, "max_tokens", 1);
    r.temperature = number(root, "temperature", 0, 2);
    r.top_p = number(root, "top_p", 0, 1);
    r.min_p = number(root, "min_p", 0, 1);
    r.top_k = count(root, "top_k", 0);
    r.frequency_penalty = number(root, "frequency_penalty", -2, 2);
    r.presence_penalty = number(root, "presence_penalty", -2, 2);
    // llama.cpp's extension: logits are divided by it, so it must be positive.
    r.repeat_penalty = number(root, "repeat_penalty", 0, std::numeric_limits<float>::max());
    if (r.repeat_penalty && *r.repeat_penalty <= 0) invalid("repeat_penalty", "repeat_penalty must be above 0");
    // Any 64-bit integer: negative seeds are taken as their two's complement, like most clients' hashes.
    if (const json* seed = field(root, "seed")) {
        if (!seed->is_number_integer()) wrong_type("seed", "an integer");
        r.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
    }
    r.stop = parse_stop(root);
    r.logit_bias = parse_logit_bias(root, n_vocab);
    r.n = parse_n(root);
    parse_logprobs(root, endpoint, r);
    parse_constraint(root, r);
    if (endpoint == Endpoint::chat) parse_tools(root, r);
    if ((r.tools || r.messages_have_tools) && !r.images.empty()) {
        invalid("tools", "tools and images in one request are not supported", "unsupported_value");
    }
    return r;
}

void apply_sampling(const CompletionRequest& request, int32_t choice, cellm_session_options& options,
                    std::vector<const char*>& stop_storage) {
    if (request.max_tokens) options.max_tokens = *request.max_tokens;
    if (request.temperature) options.temperature = *request.temperature;
    if (request.top_p) options.top_p = *request.top_p;
    if (request.min_p) options.min_p = *request.min_p;
    if (request.top_k) options.top_k = *request.top_k;
    if (request.frequency_penalty) options.frequency_penalty = *request.frequency_penalty;
    if (request.presence_penalty) options.presence_penalty = *request.presence_penalty;
    if (request.repeat_penalty) options.repeat_penalty = *request.repeat_penalty;
    // Choices differ by seed; without one, each session drew its own.
    if (request.seed) options.seed = *request.seed + static_cast<uint64_t>(choice);
    if (request.stop) {
        stop_storage.clear();
        for (const std::string& s : *request.stop) stop_storage.push_back(s.c_str());
        options.stop = stop_storage.data();
        options.n_stop = stop_storage.size();
    }
    options.logit_bias = request.logit_bias.empty() ? nullptr : request.logit_bias.data();
    options.n_logit_bias = request.logit_bias.size();
    options.logprobs = request.logprobs ? 1 : 0;
    options.top_logprobs = request.top_logprobs;
    options.grammar = request.grammar ? request.grammar->c_str() : nullptr;
    options.json_schema = request.json_schema ? request.json_schema->c_str() : nullptr;
    options.tools = request.tools ? request.tools->c_str() : nullptr;
    options.tool_choice = request.tool_choice ? request.tool_choice->c_str() : nullptr;
    options.parallel_tool_calls = request.parallel_tool_calls ? 1 : 0;
    options.chat_template_kwargs = request.chat_template_kwargs ? request.chat_template_kwargs->c_str() : nullptr;
}

}  // namespace cellm::server
