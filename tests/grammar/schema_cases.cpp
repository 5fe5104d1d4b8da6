#include "schema_cases.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace cellm::grammar::test {

namespace {

// The schemas that apply to an instance: the schema itself, what its $ref, allOf, anyOf and oneOf lead to.
void gather(const Json& schema, const Json& root, std::vector<const Json*>& out, int depth = 0) {
    if (!schema.is_object() || depth > 20) return;
    out.push_back(&schema);
    if (schema.contains("$ref") && schema["$ref"].is_string()) {
        const std::string ref = schema["$ref"].get<std::string>();
        if (const size_t hash = ref.find('#'); hash != std::string::npos) {
            try {
                gather(root.at(Json::json_pointer(ref.substr(hash + 1))), root, out, depth + 1);
            } catch (const std::exception&) {
                // An unresolvable reference: the compiler refuses such a schema anyway.
            }
        }
    }
    for (const char* key : {"allOf", "anyOf", "oneOf"}) {
        if (schema.contains(key) && schema[key].is_array()) {
            for (const Json& branch : schema[key]) gather(branch, root, out, depth + 1);
        }
    }
}

std::string serialize(const Json& instance, const std::vector<const Json*>& schemas, const Json& root) {
    std::vector<const Json*> all;
    for (const Json* s : schemas) gather(*s, root, all);
    if (instance.is_object()) {
        // Declared properties first, then other required names, then the rest as the instance has them.
        std::vector<std::string> order;
        auto add = [&](const std::string& name) {
            if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
        };
        for (const Json* s : all) {
            if (s->contains("properties") && (*s)["properties"].is_object()) {
                for (const auto& [name, _] : (*s)["properties"].items()) add(name);
            }
        }
        for (const Json* s : all) {
            if (s->contains("required") && (*s)["required"].is_array()) {
                for (const Json& name : (*s)["required"]) {
                    if (name.is_string()) add(name.get<std::string>());
                }
            }
        }
        for (const auto& [name, _] : instance.items()) add(name);
        std::string out = "{";
        for (const std::string& name : order) {
            if (!instance.contains(name)) continue;
            std::vector<const Json*> sub;
            for (const Json* s : all) {
                if (s->contains("properties") && (*s)["properties"].contains(name)) {
                    sub.push_back(&(*s)["properties"][name]);
                } else if (s->contains("additionalProperties")) {
                    sub.push_back(&(*s)["additionalProperties"]);
                }
            }
            if (out.size() > 1) out += ",";
            out += Json(name).dump() + ":" + serialize(instance[name], sub, root);
        }
        return out + "}";
    }
    if (instance.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < instance.size(); ++i) {
            std::vector<const Json*> sub;
            for (const Json* s : all) {
                for (const char* key : {"prefixItems", "items"}) {
                    if (!s->contains(key)) continue;
                    const Json& items = (*s)[key];
                    if (items.is_array() && i < items.size()) {
                        sub.push_back(&items[i]);
                    } else if (items.is_object()) {
                        sub.push_back(&items);
                    }
                }
                if (s->contains("additionalItems")) sub.push_back(&(*s)["additionalItems"]);
            }
            if (i > 0) out += ",";
            out += serialize(instance[i], sub, root);
        }
        return out + "]";
    }
    return instance.dump();
}

}  // namespace

std::string serialize_instance(const Json& instance, const Json& schema) { return serialize(instance, {&schema}, schema); }

std::vector<SchemaCase> load_schema_cases(const std::filesystem::path& dir, size_t every) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    std::vector<SchemaCase> cases;
    for (size_t i = 0; i < files.size(); i += std::max<size_t>(every, 1)) {
        std::ifstream in(files[i]);
        std::stringstream text;
        text << in.rdbuf();
        const Json file = Json::parse(text.str());
        SchemaCase c;
        c.name = files[i].filename().string();
        c.subset = c.name.find("---") != std::string::npos ? c.name.substr(0, c.name.find("---"))
                                                            : c.name.substr(0, c.name.rfind('_'));
        c.schema = file.at("schema");
        if (file.contains("tests")) {
            for (const Json& t : file["tests"]) {
                c.instances.push_back({t.at("valid").get<bool>(), serialize_instance(t.at("data"), c.schema),
                                       t.value("description", "")});
            }
        }
        cases.push_back(std::move(c));
    }
    return cases;
}

}  // namespace cellm::grammar::test
