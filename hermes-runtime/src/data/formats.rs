//! Reading one data file into rows (JSON objects): JSON Lines, JSON, CSV/TSV (column types
//! inferred as integers, floats or strings, like pandas) and parquet (through the parquet
//! crate's row reader).

use std::path::Path;

use serde_json::Value;

use super::splits::Format;
use super::{DataError, Row};

/// The rows of `path`, read as `format`.
pub fn read(path: &Path, format: Format) -> Result<Vec<Row>, DataError> {
    match format {
        Format::Jsonl => read_jsonl(path, &read_text(path)?),
        Format::Json => read_json(path),
        Format::Csv => read_delimited(path, b','),
        Format::Tsv => read_delimited(path, b'\t'),
        Format::Parquet => read_parquet(path),
    }
}

fn error(path: &Path, reason: impl std::fmt::Display) -> DataError {
    DataError::Read {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

fn read_text(path: &Path) -> Result<String, DataError> {
    std::fs::read_to_string(path).map_err(|e| error(path, e))
}

fn object(path: &Path, value: Value, what: &str) -> Result<Row, DataError> {
    match value {
        Value::Object(row) => Ok(row),
        other => Err(error(path, format!("{what} is not an object: {other}"))),
    }
}

fn read_jsonl(path: &Path, text: &str) -> Result<Vec<Row>, DataError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).map_err(|e| error(path, format!("line {}: {e}", i + 1)))?;
        rows.push(object(path, value, &format!("line {}", i + 1))?);
    }
    Ok(rows)
}

/// An array of rows, an object holding exactly one array of rows (`{"data": […]}`), or JSON
/// Lines saved as `.json`.
fn read_json(path: &Path) -> Result<Vec<Row>, DataError> {
    let text = read_text(path)?;
    let value: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(_) => return read_jsonl(path, &text),
    };
    let list =
        match value {
            Value::Array(list) => list,
            Value::Object(map) => {
                let mut arrays = map.into_iter().filter_map(|(_, v)| match v {
                    Value::Array(list) => Some(list),
                    _ => None,
                });
                match (arrays.next(), arrays.next()) {
                    (Some(list), None) => list,
                    _ => return Err(error(
                        path,
                        "expected an array of rows, or an object with exactly one array of rows",
                    )),
                }
            }
            _ => return Err(error(path, "expected an array of rows")),
        };
    list.into_iter()
        .enumerate()
        .map(|(i, v)| object(path, v, &format!("row {}", i + 1)))
        .collect()
}

fn read_delimited(path: &Path, delimiter: u8) -> Result<Vec<Row>, DataError> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(false)
        .from_path(path)
        .map_err(|e| error(path, e))?;
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| error(path, e))?
        .iter()
        .map(str::to_owned)
        .collect();
    let mut columns: Vec<Vec<String>> = vec![Vec::new(); headers.len()];
    for record in reader.records() {
        let record = record.map_err(|e| error(path, e))?;
        for (column, cell) in columns.iter_mut().zip(record.iter()) {
            column.push(cell.to_owned());
        }
    }
    let typed: Vec<Vec<Value>> = columns.into_iter().map(infer_column).collect();
    let n = typed.first().map_or(0, Vec::len);
    Ok((0..n)
        .map(|i| {
            headers
                .iter()
                .zip(&typed)
                .map(|(name, column)| (name.clone(), column[i].clone()))
                .collect()
        })
        .collect())
}

/// One type per column: all integers, else all numbers, else strings; empty cells are null.
fn infer_column(cells: Vec<String>) -> Vec<Value> {
    let filled = || cells.iter().filter(|c| !c.is_empty());
    let as_ints = filled().all(|c| c.parse::<i64>().is_ok());
    let as_floats = filled().all(|c| c.parse::<f64>().is_ok_and(f64::is_finite));
    cells
        .iter()
        .map(|c| {
            if c.is_empty() {
                Value::Null
            } else if as_ints {
                Value::from(c.parse::<i64>().unwrap_or_default())
            } else if as_floats {
                Value::from(c.parse::<f64>().unwrap_or_default())
            } else {
                Value::String(c.clone())
            }
        })
        .collect()
}

fn read_parquet(path: &Path) -> Result<Vec<Row>, DataError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = std::fs::File::open(path).map_err(|e| error(path, e))?;
    let reader = SerializedFileReader::new(file).map_err(|e| error(path, e))?;
    let rows = reader.get_row_iter(None).map_err(|e| error(path, e))?;
    let mut out = Vec::new();
    for (i, row) in rows.enumerate() {
        let row = row.map_err(|e| error(path, format!("row {}: {e}", i + 1)))?;
        let value = row.to_json_value();
        out.push(object(path, value, &format!("row {}", i + 1))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn jsonl_json_and_csv_give_the_same_rows() {
        let dir = tempfile::tempdir().unwrap();
        let want = vec![
            json!({"q": "a", "n": 1}).as_object().unwrap().clone(),
            json!({"q": "b", "n": 2}).as_object().unwrap().clone(),
        ];
        let jsonl = write(
            dir.path(),
            "a.jsonl",
            "{\"q\":\"a\",\"n\":1}\n\n{\"q\":\"b\",\"n\":2}\n",
        );
        assert_eq!(read(&jsonl, Format::Jsonl).unwrap(), want);
        let json = write(
            dir.path(),
            "a.json",
            r#"{"version": 1, "data": [{"q":"a","n":1},{"q":"b","n":2}]}"#,
        );
        assert_eq!(read(&json, Format::Json).unwrap(), want);
        let lines = write(
            dir.path(),
            "b.json",
            "{\"q\":\"a\",\"n\":1}\n{\"q\":\"b\",\"n\":2}\n",
        );
        assert_eq!(read(&lines, Format::Json).unwrap(), want);
        let csv = write(dir.path(), "a.csv", "q,n\na,1\nb,2\n");
        assert_eq!(read(&csv, Format::Csv).unwrap(), want);
        let tsv = write(dir.path(), "a.tsv", "q\tn\na\t1\nb\t2\n");
        assert_eq!(read(&tsv, Format::Tsv).unwrap(), want);
    }

    #[test]
    fn csv_columns_are_typed_as_a_whole() {
        let dir = tempfile::tempdir().unwrap();
        let csv = write(
            dir.path(),
            "a.csv",
            "id,score,answer\n1,0.5,42\n2,,forty-two\n",
        );
        let rows = read(&csv, Format::Csv).unwrap();
        assert_eq!(
            Value::Object(rows[0].clone()),
            json!({"id": 1, "score": 0.5, "answer": "42"})
        );
        assert_eq!(
            Value::Object(rows[1].clone()),
            json!({"id": 2, "score": null, "answer": "forty-two"})
        );
    }

    #[test]
    fn bad_lines_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let bad = write(dir.path(), "bad.jsonl", "{\"q\":1}\n[1,2]\n");
        let e = read(&bad, Format::Jsonl).unwrap_err().to_string();
        assert!(e.contains("bad.jsonl") && e.contains("line 2"), "{e}");
    }
}
