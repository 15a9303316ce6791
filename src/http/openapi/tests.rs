#[test]
fn every_operation_on_the_database_documents_its_503_with_retry_after() {
    let doc = super::document();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap();
            let unavailable = &op["responses"]["503"];
            if super::NO_DATABASE.contains(&id) {
                assert!(unavailable.is_null(), "{method} {path} never reaches the database");
                continue;
            }
            assert!(unavailable.is_object(), "{method} {path} ({id}) does not document its 503");
            assert_eq!(unavailable["headers"]["Retry-After"]["schema"]["type"], "integer", "{method} {path}");
            assert!(unavailable["content"]["application/problem+json"].is_object(), "{method} {path}");
            checked += 1;
        }
    }
    assert!(checked > 30, "only {checked} operations");
    assert!(doc["paths"]["/v1/triggers"]["post"]["responses"]["503"].is_object());
}

/// The five bare objects the review named, and any new one: open, so
/// generated TypeScript can read their fields.
#[test]
fn every_object_without_properties_is_open() {
    let doc = super::document();
    let schemas = &doc["components"]["schemas"];
    for schema in [
        &schemas["TriggerInput"]["properties"]["payload"],
        &schemas["InboxItem"]["properties"]["data"],
        &schemas["RuleView"]["properties"]["template"],
        &doc["paths"]["/v1/bounces/ses"]["post"]["requestBody"]["content"]["application/json"]["schema"],
    ] {
        assert_eq!(schema["additionalProperties"], true, "{schema}");
    }
}

#[test]
fn no_component_is_named_after_a_rust_type() {
    let doc = super::document();
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(!["BTreeMap", "HashMap", "Vec", "Option", "Value"].contains(&name.as_str()), "{name}");
    }
    assert!(doc.to_string().contains("#/components/schemas/UserChoices"));
}

#[test]
fn every_inbox_route_takes_the_token_in_the_query_and_both_streams_last_event_id() {
    use serde_json::json;
    let doc = super::document();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/inbox") {
            continue;
        }
        for (method, op) in item.as_object().unwrap() {
            let security = op["security"].as_array().unwrap();
            assert!(security.iter().any(|s| s.get("user_token").is_some()), "{method} {path}");
            assert!(security.iter().any(|s| s.get("user_token_query").is_some()), "{method} {path}");
        }
    }
    let query = &doc["components"]["securitySchemes"]["user_token_query"];
    assert_eq!((&query["type"], &query["in"], &query["name"]), (&json!("apiKey"), &json!("query"), &json!("token")));
    for path in ["/v1/inbox/stream", "/v1/events/stream"] {
        let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
        assert!(params.iter().any(|p| p["name"] == "Last-Event-ID" && p["in"] == "header"), "{path}");
    }
    let ids: Vec<&str> = ["get", "put"]
        .iter()
        .map(|m| doc["paths"]["/v1/inbox/preferences"][m]["operationId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["inbox_preferences_get", "inbox_preferences_put"]);
}
/// `POST /u/{token}` and `POST /p/{token}` take forms: a body schema of
/// bare `type: string` cannot be form-encoded, and schemathesis ended
/// its run with "Failed Health Check (filter_too_much)".
#[test]
fn both_forms_are_objects_of_their_fields() {
    let doc = super::document();
    let form = |path: &str| {
        doc["paths"][path]["post"]["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"].clone()
    };
    let unsubscribe = form("/u/{token}");
    assert_eq!(unsubscribe["type"], "object");
    assert_eq!(unsubscribe["required"], serde_json::json!(["List-Unsubscribe"]));
    assert_eq!(unsubscribe["properties"]["List-Unsubscribe"]["enum"], serde_json::json!(["One-Click"]));
    let preferences = form("/p/{token}");
    assert_eq!(preferences["type"], "object");
    for field in ["shown", "was", "on"] {
        assert_eq!(preferences["properties"][field]["type"], "array", "{field}");
    }
    assert_eq!(doc["paths"]["/p/{token}"]["post"]["requestBody"]["required"], false);
    for path in ["/u/{token}", "/p/{token}"] {
        for method in ["get", "post"] {
            let token = &doc["paths"][path][method]["parameters"][0];
            assert_eq!((&token["name"], &token["schema"]["pattern"]), (&"token".into(), &super::SIGNED_TOKEN.into()));
        }
    }
}

/// Every route answers 400 for a NUL in its path or query; every text
/// parameter says so (or is narrower still).
#[test]
fn every_text_in_a_path_or_query_states_what_it_takes() {
    let doc = super::document();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let schema = &p["schema"];
                if p["in"] == "header" || schema["type"] != "string" {
                    continue;
                }
                assert!(
                    schema.get("pattern").is_some() || schema.get("enum").is_some() || schema.get("format").is_some(),
                    "{method} {path} {}: {schema}",
                    p["name"]
                );
            }
        }
    }
}

/// The time zone pattern names exactly the zones `PUT /v1/users`
/// accepts, no more and no fewer.
#[test]
fn the_zone_pattern_is_exactly_the_zones_users_may_have() {
    let doc = super::document();
    let pattern = doc["components"]["schemas"]["RecipientInput"]["properties"]["timezone"]["pattern"]
        .as_str()
        .unwrap()
        .to_owned();
    let names: Vec<String> = pattern
        .strip_prefix("^(?:")
        .and_then(|p| p.strip_suffix(")$"))
        .unwrap()
        .split('|')
        .map(|n| n.replace(r"\+", "+"))
        .collect();
    assert!(names.len() > 400, "{}", names.len());
    for name in &names {
        let input = crate::planning::recipient::RecipientInput { timezone: Some(name.clone()), ..Default::default() };
        let user = crate::domain::UserId::parse("user_id", "u").unwrap();
        assert!(input.into_row(&user, crate::clock::Millis(0)).is_ok(), "{name}");
        assert!(!name.contains(['(', ')', '[', '.', '*', '?']), "{name} needs escaping");
    }
    for refused in ["0", "Mars/Base", "europe/berlin"] {
        assert!(!names.iter().any(|n| n == refused), "{refused}");
    }
    assert!(names.iter().any(|n| n == "GMT+0") && names.iter().any(|n| n == "Europe/Berlin"));
}

/// What the rule handlers check of a field, stated on both the new
/// rule and the edit.
#[test]
fn the_rules_state_their_bounds() {
    let doc = super::document();
    for rule in ["RuleInput", "RulePatch"] {
        let p = &doc["components"]["schemas"][rule]["properties"];
        let mut channels = serde_json::json!(crate::delivery::channel::catalog::KNOWN);
        if rule == "RulePatch" {
            // null: leave the channel as it is.
            channels.as_array_mut().unwrap().push(serde_json::Value::Null);
        }
        assert_eq!(p["channel"]["enum"], channels, "{rule}");
        assert_eq!(p["delay"]["maximum"], 366 * 24 * 3600, "{rule}");
        assert_eq!(p["grace"]["minimum"], 0, "{rule}");
        assert_eq!(p["name"]["pattern"], super::NOT_BLANK, "{rule}");
        assert_eq!(p["category"]["maxLength"], crate::planning::category::MAX_LEN, "{rule}");
        assert_eq!(p["trigger_type"]["pattern"], "^[A-Za-z0-9._:/-]{1,128}$", "{rule}");
    }
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["DigestInput"]["properties"]["max_items"]["maximum"], 1000);
    assert_eq!(schemas["ThrottleInput"]["properties"]["scope"]["enum"], serde_json::json!(["rule", "category"]));
    assert_eq!(schemas["SuppressionInput"]["properties"]["email"]["pattern"], super::HASHABLE_EMAIL);
    let categories = &schemas["PreferenceChange"]["properties"]["categories"]["additionalProperties"];
    assert_eq!(categories["additionalProperties"]["type"], "boolean");
    let topics = &schemas["PreferenceChange"]["properties"]["topics"];
    assert_eq!(
        (&topics["additionalProperties"]["type"], &topics["propertyNames"]["maxLength"]),
        (&"boolean".into(), &200.into())
    );
}
/// `<tag>_<handler>` ids, without a word said twice
/// (`unsubscribe_unsubscribe` was one).
#[test]
fn operation_ids_do_not_stutter() {
    let doc = super::document();
    let mut seen = std::collections::BTreeSet::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            let id = op["operationId"].as_str().unwrap();
            let tag = op["tags"][0].as_str().unwrap();
            assert!(id.starts_with(&format!("{tag}_")), "{id}");
            let words: Vec<&str> = id.split('_').collect();
            assert!(words.windows(2).all(|w| w[0] != w[1]), "{id}");
            assert!(seen.insert(id.to_owned()), "{id} twice");
        }
    }
}
/// The document's example rule is one the handler accepts.
#[test]
fn the_example_rule_is_valid() {
    let doc = super::document();
    let example = doc["components"]["schemas"]["RuleInput"]["examples"][0].clone();
    let input: crate::planning::rule::RuleInput = serde_json::from_value(example).unwrap();
    let policy = crate::delivery::channel::webhook::WebhookPolicy::default();
    assert_eq!(crate::planning::rule::validate(&input, &policy), Ok(()));
}
/// Every `limit` states its bounds (1 to the route's maximum), as
/// `ApiError::page_limit` enforces them.
#[test]
fn every_limit_states_its_bounds() {
    let doc = super::document();
    let mut limits = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten().filter(|p| p["name"] == "limit") {
                assert_eq!(p["schema"]["minimum"], 1, "{method} {path}");
                assert!(p["schema"]["maximum"].as_u64().is_some_and(|m| m >= 100), "{method} {path}");
                limits += 1;
            }
        }
    }
    assert!(limits >= 5, "{limits}");
}
