//! The verifier's reward files, read as Harbor reads them: `reward.json` (an object of named
//! numeric metrics) first, else `reward.txt` (one number, the metric `reward`). Anything else
//! (empty, not a number, not finite) is a verifier failure, never a reward.

use std::collections::BTreeMap;

/// Named metrics of one verification.
pub type Rewards = BTreeMap<String, f64>;

/// Parses `reward.json` text.
pub fn parse_reward_json(text: &str) -> Result<Rewards, String> {
    if text.trim().is_empty() {
        return Err("reward.json is empty".into());
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("reward.json is not JSON: {e}"))?;
    let object = match value {
        serde_json::Value::Object(o) => o,
        serde_json::Value::Number(n) => {
            serde_json::Map::from_iter([("reward".to_owned(), serde_json::Value::Number(n))])
        }
        other => {
            return Err(format!(
                "reward.json holds {other}, not an object of metrics"
            ))
        }
    };
    let mut rewards = Rewards::new();
    for (key, v) in object {
        let x = v
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or_else(|| format!("reward.json: metric {key} is {v}, not a finite number"))?;
        rewards.insert(key, x);
    }
    Ok(rewards)
}

/// Parses `reward.txt` text.
pub fn parse_reward_txt(text: &str) -> Result<Rewards, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("reward.txt is empty".into());
    }
    let x: f64 = t
        .parse()
        .map_err(|_| format!("reward.txt holds {t:?}, not a number"))?;
    if !x.is_finite() {
        return Err(format!("reward.txt holds {t}, not a finite number"));
    }
    Ok(Rewards::from([("reward".to_owned(), x)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_files_parse_strictly() {
        assert_eq!(parse_reward_txt(" 1\n").unwrap()["reward"], 1.0);
        assert_eq!(parse_reward_txt("0.25").unwrap()["reward"], 0.25);
        assert!(parse_reward_txt("").is_err());
        assert!(parse_reward_txt("yes").is_err());
        assert!(parse_reward_txt("nan").is_err());
        let r = parse_reward_json(r#"{"reward": 1, "style": 0.5}"#).unwrap();
        assert_eq!((r["reward"], r["style"]), (1.0, 0.5));
        assert!(parse_reward_json(r#"{"reward": "1"}"#).is_err());
        assert!(parse_reward_json("[1]").is_err());
        assert!(parse_reward_json("").is_err());
    }
}
