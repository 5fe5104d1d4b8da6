// Renders chat templates for compare_templates.py: reads a JSON array of cases
// [{"template_path": ..., "context": {...}, "now": <unix time>}] and writes [{"output": ...} or {"error": ...}]
// in the same order. Usage: jinja_render CASES.json RESULTS.json
#include "jinja/template.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s CASES.json RESULTS.json\n", argv[0]);
        return 2;
    }
    try {
        auto cases = nlohmann::ordered_json::parse(read_file(argv[1]));
        std::map<std::string, std::string> sources;
        nlohmann::ordered_json results = nlohmann::ordered_json::array();
        for (const auto& c : cases) {
            const std::string path = c.at("template_path").get<std::string>();
            if (!sources.count(path)) sources[path] = read_file(path);
            cellm::jinja::RenderOptions options;
            if (c.contains("now")) options.now = c.at("now").get<std::time_t>();
            nlohmann::ordered_json result;
            try {
                result["output"] = cellm::jinja::Template::parse(sources[path]).render(c.at("context"), options);
            } catch (const cellm::jinja::TemplateError& e) {
                result["error"] = e.what();
            }
            results.push_back(std::move(result));
        }
        std::ofstream out(argv[2], std::ios::binary);
        out << results.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        return out ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "jinja_render: %s\n", e.what());
        return 1;
    }
}
