//! A session planning a read from the template of its shape (see
//! [`super::templates`]): the statement is parsed, its comparison
//! literals go into the template's placeholders, and only the physical
//! plan is made.

use std::sync::Arc;

use datafusion::execution::TaskContext;
use datafusion::execution::context::SessionState;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use super::lexed::{self, TokenShape};
use super::plans::{self, MAX_TEXT, Ready, Seen};
use super::rebind;
use super::templates::{self, KeptPlan, Next, Template, starts_a_query};
use super::{SqlSession, limits};

impl SqlSession {
    /// A plan for `sql` made from the template of its shape, where the
    /// session has one (or makes one now: the second statement of a
    /// shape). `None`: plan the text as it is, which also reports any
    /// error.
    pub(crate) async fn shaped_plan(&self, sql: &str) -> Option<Ready> {
        let now = self.plans.seen(self.store.catalog_generation())?;
        if sql.len() > MAX_TEXT || !starts_a_query(sql) {
            return None;
        }
        let (state, task) = self.planning_state(now);
        let dialect = state.config().options().sql_parser.dialect;
        // A token sequence seen before: its shape without a parse (the
        // first statement of the sequence passed the checks below).
        let lexed = lexed::lex(sql, dialect.as_ref());
        if let Some(lexed) = &lexed
            && let Some(known) = self.shapes.token_shape(&lexed.key)
            && let Some(template) = self.shapes.template(known.shape(), now)
            && let Some(literals) = known.literals(lexed)
        {
            let ready = self
                .plan_from_template(&state, task, &template, &literals)
                .await;
            if ready.is_some() {
                self.shapes.count_by_tokens();
            }
            return ready;
        }
        if limits::check_statement(sql).is_err() {
            return None;
        }
        let DfStatement::Statement(mut statement) = state.sql_to_statement(sql, &dialect).ok()?
        else {
            return None;
        };
        limits::balance_chains(&mut statement);
        let shape = templates::shape(&mut statement)?;
        if let Some(lexed) = lexed
            && let Some(known) = TokenShape::of(&lexed, &shape.text, &shape.literals, &shape.places)
        {
            self.shapes.keep_token_shape(lexed.key, known);
        }
        let template = match self.shapes.next(&shape.text, now) {
            Next::Text => return None,
            Next::Use(template) => template,
            Next::Make => {
                let made = self
                    .make_template(&state, *statement, shape.literals.len())
                    .await;
                self.shapes.made(&shape.text, now, made.clone());
                made?
            }
        };
        self.plan_from_template(&state, task, &template, &shape.literals)
            .await
    }

    /// The plan of a statement of `template`'s shape whose literals are
    /// `literals`.
    async fn plan_from_template(
        &self,
        state: &Arc<SessionState>,
        task: Arc<TaskContext>,
        template: &Template,
        literals: &[datafusion::common::ScalarValue],
    ) -> Option<Ready> {
        let values = templates::bind(literals, &template.types)?;
        let kept = template.kept();
        if let KeptPlan::Plan(kept) = &kept
            && let Some(physical) = kept.plan_for(state.as_ref(), &values)
        {
            self.shapes.count_use(true);
            return Some((physical, task));
        }
        let plan = template
            .plan
            .clone()
            .replace_params_with_values(&values)
            .ok()?;
        let physical = state
            .query_planner()
            .create_physical_plan(&plan, state.as_ref())
            .await
            .ok()?;
        // The first statement planned from the template, or one the kept
        // plan did not fit: its plan is kept.
        if !matches!(kept, KeptPlan::Never) {
            template.keep(
                rebind::template_scan(&template.plan)
                    .zip(plans::reusable(&physical))
                    .and_then(|(scan, (plan, reset))| scan.keep(plan, reset)),
            );
        }
        self.shapes.count_use(false);
        Some((physical, task))
    }

    /// The template of a shape: `statement` (with `placeholders`
    /// placeholders) planned and optimized, if it may have one.
    async fn make_template(
        &self,
        state: &SessionState,
        statement: Statement,
        placeholders: usize,
    ) -> Option<Arc<Template>> {
        let plan = state
            .statement_to_plan(DfStatement::Statement(Box::new(statement)))
            .await
            .ok()?;
        let plan = self.access.check_plan(plan).ok()?;
        if !super::plans::keepable_template(&plan) {
            return None;
        }
        let mut types = plan.get_parameter_types().ok()?;
        if types.len() != placeholders {
            return None;
        }
        let types = (1..=placeholders)
            .map(|i| types.remove(&format!("${i}")).flatten())
            .collect::<Option<Vec<_>>>()?;
        let plan = state.optimize(&plan).ok()?;
        Some(Arc::new(Template {
            plan,
            types,
            physical: std::sync::Mutex::default(),
        }))
    }

    /// The session's DataFusion state and a task context from it, kept
    /// while the session and the catalog are as they were.
    fn planning_state(&self, now: Seen) -> (Arc<SessionState>, Arc<TaskContext>) {
        if let Some(kept) = self.shapes.planning(now) {
            return kept;
        }
        let state = Arc::new(self.ctx.state());
        let task = Arc::new(TaskContext::from(state.as_ref()));
        self.shapes
            .keep_planning(now, Arc::clone(&state), Arc::clone(&task));
        (state, task)
    }
}
