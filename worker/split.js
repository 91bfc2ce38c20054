// SQL text to statements, as D1's API splits a "sql" holding several.

// Split SQL text at top-level semicolons, skipping '...', "...", `...`, [...] and comments.
// Inside CREATE TRIGGER ... BEGIN ... END only the semicolon after END ends the statement.
// Pieces holding only whitespace or comments are dropped.
export function splitStatements(sql) {
  const out = [];
  let start = 0, hasCode = false, words = [], last = "";
  let i = 0;
  const n = sql.length;
  const isTrigger = () => words[1] === "TRIGGER" || (words[2] === "TRIGGER" && /^TEMP(ORARY)?$/.test(words[1]));
  while (i < n) {
    const c = sql[i];
    if (c === "-" && sql[i + 1] === "-") {
      const end = sql.indexOf("\n", i);
      i = end === -1 ? n : end + 1;
    } else if (c === "/" && sql[i + 1] === "*") {
      const end = sql.indexOf("*/", i + 2);
      i = end === -1 ? n : end + 2;
    } else if (c === "'" || c === '"' || c === "`" || c === "[") {
      const close = c === "[" ? "]" : c;
      let j = i + 1;
      for (;;) {
        const k = sql.indexOf(close, j);
        if (k === -1) { j = n; break; }
        if (close !== "]" && sql[k + 1] === close) { j = k + 2; continue; } // doubled quote
        j = k + 1;
        break;
      }
      hasCode = true; last = "";
      i = j;
    } else if (c === ";") {
      if (!(words[0] === "CREATE" && isTrigger() && last !== "END")) {
        if (hasCode) out.push(sql.slice(start, i).trim());
        start = i + 1; hasCode = false; words = []; last = "";
      }
      i++;
    } else if (/[A-Za-z_]/.test(c)) {
      let j = i + 1;
      while (j < n && /[A-Za-z0-9_$]/.test(sql[j])) j++;
      last = sql.slice(i, j).toUpperCase();
      if (words.length < 3) words.push(last);
      hasCode = true;
      i = j;
    } else {
      if (!/\s/.test(c)) { hasCode = true; last = ""; }
      i++;
    }
  }
  if (hasCode) out.push(sql.slice(start).trim());
  return out;
}
