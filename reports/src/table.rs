//! The document model every renderer shares: a title, key/value summary lines and one
//! table.

/// Horizontal alignment of a column in text output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Left-aligned (names, labels).
    Left,
    /// Right-aligned (numbers).
    Right,
}

/// A column header and its alignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Header text.
    pub header: String,
    /// Alignment in text output.
    pub align: Align,
}

/// Rows of cells under a set of columns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Table {
    /// Columns.
    pub columns: Vec<Column>,
    /// Rows; each has one cell per column.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns and no rows.
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = (S, Align)>) -> Self {
        let columns = columns
            .into_iter()
            .map(|(h, align)| Column {
                header: h.into(),
                align,
            })
            .collect();
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    /// Appends a row. Missing cells are left empty and extra cells dropped, so every row
    /// has one cell per column.
    pub fn push<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut row: Vec<String> = cells.into_iter().map(Into::into).collect();
        row.resize(self.columns.len(), String::new());
        self.rows.push(row);
    }
}

/// What a command shows: a title, summary lines, and a table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Document {
    /// Title line.
    pub title: String,
    /// Key/value lines shown above the table (text only).
    pub summary: Vec<(String, String)>,
    /// The table.
    pub table: Table,
    /// Further tables shown under it (text only; CSV writes the first).
    pub more: Vec<Table>,
    /// Notes shown under the tables (text only).
    pub notes: Vec<String>,
}

impl Document {
    /// An empty document with a title.
    pub fn new(title: impl Into<String>) -> Self {
        Document {
            title: title.into(),
            ..Document::default()
        }
    }

    /// Adds a summary line.
    #[must_use]
    pub fn summary(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.summary.push((key.into(), value.into()));
        self
    }

    /// Sets the table.
    #[must_use]
    pub fn table(mut self, table: Table) -> Self {
        self.table = table;
        self
    }

    /// Adds a table under the first one (text only).
    #[must_use]
    pub fn then_table(mut self, table: Table) -> Self {
        self.more.push(table);
        self
    }

    /// Adds a note.
    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Adds notes, in order.
    #[must_use]
    pub fn notes(mut self, notes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.notes.extend(notes.into_iter().map(Into::into));
        self
    }
}

/// Turns a [`Document`] into text in one format.
pub trait Renderer {
    /// Renders the document.
    fn render(&self, doc: &Document) -> Result<String, crate::error::Error>;
}
